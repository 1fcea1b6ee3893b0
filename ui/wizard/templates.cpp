// Run templates (see templates.h).
#include "ui/wizard/templates.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>
#include <QStandardPaths>

#include <exception>

#include "engine/config/config_io.h"
#include "flotilla/demo_config.h"
#include "ui/common/savefile.h"

namespace flotilla::ui {

TemplateStore::TemplateStore(const QString& dir) : m_dir(dir) {
  if (m_dir.isEmpty())
    m_dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/templates");
}

RunTemplate TemplateStore::demo() {
  RunTemplate t;
  t.name = QStringLiteral("demo");
  t.description = QObject::tr("Demo: tiny GPT on a synthetic corpus, this machine's CPU (ready to launch)");
  t.toml = QString::fromUtf8(flotilla::cli::kDemoConfigToml);
  t.builtIn = true;
  return t;
}

flotilla::RunConfig TemplateStore::demoConfig() {
  return flotilla::parse_config_toml(flotilla::cli::kDemoConfigToml, "resources/configs/demo.toml");
}

QList<RunTemplate> TemplateStore::list() const {
  QList<RunTemplate> out = {demo()};
  const QDir dir(m_dir);
  const QStringList files = dir.entryList({QStringLiteral("*.toml")}, QDir::Files, QDir::Name);
  for (const QString& file : files) {
    QFile f(dir.filePath(file));
    if (!f.open(QIODevice::ReadOnly)) continue;
    RunTemplate t;
    t.name = QFileInfo(file).completeBaseName();
    t.path = f.fileName();
    t.toml = QString::fromUtf8(f.readAll());
    t.description = QObject::tr("%1 (saved template)").arg(t.name);
    out.append(t);
  }
  return out;
}

bool TemplateStore::load(const RunTemplate& t, flotilla::RunConfig* out, QString* error) {
  try {
    const std::string source = t.path.isEmpty() ? t.name.toStdString() + ".toml" : t.path.toStdString();
    *out = flotilla::parse_config_toml(t.toml.toStdString(), source);
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
}

bool TemplateStore::save(const QString& name, const flotilla::RunConfig& config, QString* error) const {
  static const QRegularExpression kName(QStringLiteral("^[A-Za-z0-9_.-]+$"));
  if (!kName.match(name).hasMatch() || name.startsWith(QLatin1Char('.'))) {
    if (error)
      *error = QObject::tr("Template name \"%1\": use letters, digits, '-', '_' and '.' only.").arg(name);
    return false;
  }
  if (name == demo().name) {
    if (error) *error = QObject::tr("\"demo\" is the built-in template: choose another name.");
    return false;
  }
  if (!QDir().mkpath(m_dir)) {
    if (error) *error = QObject::tr("Cannot create the templates folder %1.").arg(m_dir);
    return false;
  }
  return saveFileAtomically(QDir(m_dir).filePath(name + QStringLiteral(".toml")),
                            QByteArray::fromStdString(flotilla::config_to_toml(config)), error);
}

}  // namespace flotilla::ui
