// Run templates for the New Run wizard: the built-in demo (resources/configs/demo.toml, embedded in
// the engine at build time, so the app and `flotilla-worker demo` start from the same file) and
// the user's own, stored as TOML files in <data dir>/templates.
//
// Decision: a template is a complete config file, written by config_to_toml and read by the
// engine's parser, never a partial overlay: a saved template still opens after defaults change,
// and a damaged one is listed with the parser's message instead of being skipped silently.
#pragma once

#include <QList>
#include <QString>

#include "engine/config/run_config.h"

namespace flotilla::ui {

struct RunTemplate {
  QString name;         // "demo", or the file's base name
  QString description;  // one line for the picker
  QString toml;         // the file's text
  QString path;         // empty for built-ins
  bool builtIn = false;
};

class TemplateStore {
 public:
  // dir: where user templates live; empty = QStandardPaths AppDataLocation + "/templates".
  explicit TemplateStore(const QString& dir = QString());

  QString directory() const { return m_dir; }
  // Built-ins first, then the user's templates sorted by name.
  QList<RunTemplate> list() const;
  // Parses a template; false with *error (the parser's message) when it does not parse.
  static bool load(const RunTemplate& t, flotilla::RunConfig* out, QString* error);
  // Writes <dir>/<name>.toml (name: letters, digits, '-', '_', '.'); false with *error.
  bool save(const QString& name, const flotilla::RunConfig& config, QString* error) const;

  // The ready-to-launch demo config (the embedded demo.toml).
  static RunTemplate demo();
  static flotilla::RunConfig demoConfig();

 private:
  QString m_dir;
};

}  // namespace flotilla::ui
