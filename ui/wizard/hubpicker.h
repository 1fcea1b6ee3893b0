// The Model page's "Hugging Face model by name" source (issue 40): the models in the local Hugging
// Face cache in a searchable table (name, architecture, parameters, size on disk, revision, whether
// Flotilla can train it), a name field checked as it is typed ("org/name" or "org/name@revision"),
// and Download for a name the cache lacks, with a progress bar, the bytes, rate and time left, and
// Cancel.
//
// Decision: the cache is listed by the engine's hub::list_cached_models on a worker thread (a large
// cache's safetensors headers take a moment, more on a network disk). A download runs as
// `flotilla-worker hub download NAME --json` in a QProcess, so the window never waits, the one
// download code (the engine's) serves the app, the CLI and the nodes, and Cancel is a kill: the
// worker keeps blobs/<etag>.incomplete and the next download resumes from it. The picker never
// writes the draft: picking a row, or a download that ends, emits chosen(name), and the page sets
// model.init_from and reads the snapshot exactly as it reads a folder.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QProcess>
#include <QString>

#include <vector>

#include "engine/interop/hub.h"

class QFormLayout;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTableWidget;
class QWidget;

namespace flotilla::ui {

// What the cache holds, read off the UI thread.
struct HubListing {
  QString cacheDir;     // hub::cache_dir().path
  QString cacheSource;  // the setting that chose it ("HF_HUB_CACHE", "HF_HOME", "~/.cache")
  std::vector<flotilla::interop::hub::CachedModel> models;
  QString error;  // the engine's message when the cache could not be read
};
// Lists the cache hub::cache_dir() names. Never throws.
HubListing listHubCache();

// "model.safetensors (2/5): 120 of 270 MB, 14 MB/s, 11 s left".
QString hubProgressText(const flotilla::interop::hub::Progress& p);
// The model.init_from a cached row stands for: "org/name" when its main branch points at the
// row's snapshot, else "org/name@<the first ref that does>", else "org/name@<commit>".
QString hubRowName(const flotilla::interop::hub::CachedModel& m);

class HubPicker : public QObject {
  Q_OBJECT

 public:
  enum Column { NameColumn = 0, ArchColumn, ParamsColumn, SizeColumn, RevisionColumn, TrainableColumn };

  // The widgets are children of `page` (their object names are the tests' handles).
  explicit HubPicker(QWidget* page);
  ~HubPicker() override;

  // Adds the rows: the cache, Search, the table, Name (with Download), the download's progress.
  void addRows(QFormLayout* form);
  void setRowsVisible(bool visible);
  // The flotilla-worker that downloads ("": runs::find_worker(), beside the app or on PATH).
  void setWorkerPath(const QString& path) { m_workerPath = path; }

  // Lists the cache again, on a worker thread (isListing() until the table is filled).
  void refreshCache();
  bool isListing() const { return m_listing; }
  const HubListing& listing() const { return m_cache; }
  // Shows the draft's choice: the name in the field and its row selected (no chosen() signal).
  void showChosen(const QString& name);
  // Picks `repoId`'s row as a click does (emits chosen()). False when it is not listed or not
  // trainable.
  bool pick(const QString& repoId);

  // Downloads the name field's model (refused inline, with no process started, when the name is not
  // one). On success the cache is listed again and the model chosen.
  void startDownload();
  void cancelDownload();
  bool isDownloading() const { return m_process != nullptr; }
  // "org/name" of the download under way ("" when none).
  QString downloadingRepo() const { return isDownloading() ? m_downloadRepo : QString(); }
  QString nameProblem() const;   // the refusal of the typed name, inline under the field ("": none)
  QString statusText() const;    // the progress line, or how the last download ended
  QString progressText() const;  // the last progress line ("" before the first)

  QTableWidget* table() const { return m_table; }
  QLineEdit* searchEdit() const { return m_search; }
  QLineEdit* nameEdit() const { return m_name; }
  QPushButton* downloadButton() const { return m_download; }
  QPushButton* cancelButton() const { return m_cancel; }
  QProgressBar* progressBar() const { return m_progress; }
  QLabel* cacheLabel() const { return m_cacheLabel; }
  QProcess* process() const { return m_process; }

 signals:
  // The model to train: the page sets model.init_from to `name` and reads its snapshot.
  void chosen(const QString& name);
  // A listing or a download started or ended (the page rechecks: Next waits for a download).
  void stateChanged();

 private:
  void onListed();
  void fillTable();
  void applyFilter();
  void onNameEdited();
  void onSelection();
  void updateControls();
  void onOutput();
  void onFinished(int code, QProcess::ExitStatus status);
  void handleLine(const QByteArray& line);
  // Whether the cache holds `name`'s revision with every file a run needs (hub::find_cached).
  bool isCached(const QString& name) const;

  QWidget* m_page;
  QFormLayout* m_form = nullptr;
  QLabel* m_cacheLabel;
  QLineEdit* m_search;
  QTableWidget* m_table;
  QWidget* m_nameRow;
  QLineEdit* m_name;
  QPushButton* m_download;
  QLabel* m_nameMessage;
  QWidget* m_progressRow;
  QProgressBar* m_progress;
  QPushButton* m_cancel;
  QLabel* m_status;
  QString m_workerPath;

  QFutureWatcher<HubListing> m_watcher;
  HubListing m_cache;
  bool m_listing = false;
  bool m_listAgain = false;   // refreshCache() while a listing ran
  QString m_selectAfterList;  // a downloaded name to choose once the cache is listed again
  bool m_filling = false;
  QString m_chosen;  // the name the page uses (showChosen, or a row picked)

  QProcess* m_process = nullptr;
  QString m_downloadName;  // as typed
  QString m_downloadRepo;  // its repo id
  QByteArray m_out, m_err;
  bool m_cancelled = false;
  bool m_ended = false;  // a "done" or "error" event arrived
  QString m_progressLine;
  QString m_outcome;  // how the last download ended (shown until the next one)
  QString m_doneCommit;
};

}  // namespace flotilla::ui
