// Data preparation job (see dataprepare.h).
#include "ui/wizard/dataprepare.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLocale>

#include <exception>
#include <string>
#include <vector>

#include "engine/data/records.h"
#include "engine/tokenizer/bpe.h"

namespace flotilla::ui {
namespace {

QString tr(const char* text) { return QCoreApplication::translate("DataPrepare", text); }
QString count(int64_t n) { return QLocale().toString(static_cast<qlonglong>(n)); }

bool isJsonl(const QString& path) {
  const QString ext = QFileInfo(path).suffix().toLower();
  return ext == QLatin1String("jsonl") || ext == QLatin1String("ndjson");
}

// The text a tokenizer trains on: a text file whole; of a JSONL record its text, prompt and
// completion, or the messages' contents (not the JSON around them).
std::vector<std::string> trainingTexts(const QStringList& inputs) {
  std::vector<std::string> out;
  for (const QString& path : inputs) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
      throw std::runtime_error("cannot read " + path.toStdString() + ": " + f.errorString().toStdString());
    if (!isJsonl(path)) {
      out.push_back(f.readAll().toStdString());
      continue;
    }
    int line = 0;
    while (!f.atEnd()) {
      ++line;
      const std::string text = f.readLine().trimmed().toStdString();
      if (text.empty()) continue;
      const flotilla::Record r =
          flotilla::parse_record(text, "text", path.toStdString() + " line " + std::to_string(line));
      if (r.kind == flotilla::RecordKind::kText) out.push_back(r.text);
      if (r.kind == flotilla::RecordKind::kCompletion) out.push_back(r.prompt + r.completion);
      for (const flotilla::ChatMessage& m : r.messages) out.push_back(m.content + m.reasoning.value_or(""));
    }
  }
  return out;
}

}  // namespace

PrepareSummary runPrepare(const PrepareRequest& request) {
  PrepareSummary summary;
  summary.outDir = request.outDir;
  summary.seqLen = request.seqLen;
  summary.pack = request.pack;
  summary.valRows = request.valRows;
  summary.valFraction = request.valFraction;
  try {
    flotilla::Tokenizer tokenizer;
    if (request.source == TokenizerSource::Train) {
      const std::vector<std::string> texts = trainingTexts(request.inputs);
      tokenizer = flotilla::Tokenizer::train(std::vector<std::string_view>(texts.begin(), texts.end()),
                                             request.trainVocab);
      if (!QDir().mkpath(request.outDir))
        throw std::runtime_error("cannot create the output folder " + request.outDir.toStdString());
      summary.savedTokenizer = QDir(request.outDir).filePath(QLatin1String(kTrainedTokenizerName));
      tokenizer.save(summary.savedTokenizer.toStdString());
    } else {
      tokenizer = flotilla::Tokenizer::load(request.tokenizer.toStdString());
    }
    flotilla::PrepareOptions options;
    for (const QString& in : request.inputs) options.inputs.push_back(in.toStdString());
    options.out_dir = request.outDir.toStdString();
    options.force = true;
    options.chat_format = request.chatFormat.toStdString();
    options.pack = request.pack;
    options.seq_len = request.seqLen;
    options.val_rows = request.valRows;
    options.val_fraction = request.valRows > 0 ? 0.0 : request.valFraction;
    summary.result = flotilla::prepare_shards(tokenizer, options);
    summary.tokenizerVocab = tokenizer.vocab_size();
    summary.tokenizerOrigin = QString::fromStdString(tokenizer.origin());
    summary.ok = true;
  } catch (const std::exception& e) {
    summary.error = QString::fromUtf8(e.what());
  }
  return summary;
}

QStringList describePrepared(const PrepareSummary& s) {
  const flotilla::PrepareResult& r = s.result;
  QStringList kinds;
  if (r.text_records > 0) kinds << tr("%1 text").arg(count(r.text_records));
  if (r.completion_records > 0) kinds << tr("%1 prompt/completion").arg(count(r.completion_records));
  if (r.chat_records > 0)
    kinds << tr("%1 chat (%2 format)").arg(count(r.chat_records), QString::fromStdString(r.chat_format));
  QStringList lines;
  lines << tr("%1 documents%2 → %3")
               .arg(count(r.documents),
                    kinds.isEmpty() ? QString() : tr(": ") + kinds.join(QStringLiteral(", ")), s.outDir);
  const QString origin = s.tokenizerOrigin == QLatin1String("trained") ? tr("trained")
                         : s.tokenizerOrigin == QLatin1String("gpt2")  ? tr("GPT-2 vocab.json + merges.txt")
                                                                       : s.tokenizerOrigin;
  lines << tr("Tokens: %1 train, %2 validation (tokenizer: %3 tokens, %4)")
               .arg(count(r.train_tokens), count(r.val_tokens), count(s.tokenizerVocab), origin);
  if (r.labeled)
    lines << tr("Loss targets: %1 train, %2 validation (labeled shards: the loss counts on completions and "
                "assistant turns only)")
                 .arg(count(r.train_targets), count(r.val_targets));
  else
    lines << tr("Loss targets: %1 train, %2 validation (every token after the first)")
                 .arg(count(r.train_targets), count(r.val_targets));
  if (r.train_rows > 0 || r.val_rows > 0) {
    QString rows = tr("Sequences of %1 tokens (train.seq_len): %2 train, %3 validation")
                       .arg(count(s.seqLen), count(r.train_rows), count(r.val_rows));
    if (r.labeled)
      rows += s.pack ? tr(" (documents packed, attention kept within each)") : tr(" (one document per row)");
    lines << rows;
    if (r.split_documents == 1)
      lines << tr("1 document is longer than a row and is split into pieces");
    else if (r.split_documents > 1)
      lines
          << tr("%1 documents are longer than a row and are split into pieces").arg(count(r.split_documents));
  }
  if (!s.savedTokenizer.isEmpty())
    lines << tr("Tokenizer trained here, saved as %1 (sample --tokenizer %2 decodes with it)")
                 .arg(s.savedTokenizer, s.outDir);
  return lines;
}

}  // namespace flotilla::ui
