// App preferences (QSettings, organisation/application "Flotilla"): the workspace to open at the
// next start, display units and the theme. Everything about runs, nodes and prices stays in the
// workspace database; this file holds only how this user likes the app to look.
//
// Decision: the theme is applied by replacing the application's QPalette, never with style
// sheets, so every widget (and every plot adapter, which reads the palette) follows it at once.
// "System" restores the palette the application had before the first change, captured once.
#pragma once

#include <QString>

#include <optional>

namespace flotilla::ui {

struct Preferences {
  enum class Theme { System, Light, Dark };
  enum class TokenUnit { Thousands, Millions };
  enum class TimeUnit { Seconds, Hours };

  QString workspaceDir;  // "" = the default (or --workspace); takes effect at the next start
  Theme theme = Theme::System;
  TokenUnit tokens = TokenUnit::Millions;
  TimeUnit time = TimeUnit::Hours;
  QString currency = QStringLiteral("$");
  bool notifyDesktop = true;  // a desktop notification when a run finishes, fails, stalls, ...

  static constexpr const char* kWorkspaceKey = "preferences/workspaceDir";
  static constexpr const char* kThemeKey = "preferences/theme";
  static constexpr const char* kTokensKey = "preferences/tokenUnit";
  static constexpr const char* kTimeKey = "preferences/timeUnit";
  static constexpr const char* kNotifyKey = "preferences/notifyDesktop";

  static Preferences load();
  // Writes the preferences and syncs the file (QSettings replaces it atomically: a crash leaves the
  // old file or the new one, never a torn one; docs/reliability.md D5). Returns "" when it was
  // written, else a sentence naming the file and saying the old settings are kept.
  QString save() const;

  // "12.3M tokens" / "12,345k tokens" style numbers (no unit word).
  QString formatTokens(double tokens) const;
  QString tokenUnitLabel() const;
  // Seconds as "3.25 h" or "11700 s".
  QString formatDuration(double seconds) const;
  QString timeUnitLabel() const;
  // Money as every page and `flotilla` write it (runs/figures.h): "$0.1733", "$12.35".
  QString formatMoney(double usd) const;
  // formatMoney, or "unpriced" for a figure with no price (nullopt), never "$0.00".
  QString formatCost(std::optional<double> usd) const;
};

QString themeName(Preferences::Theme theme);

// Replaces the application palette (see the decision above). Safe to call repeatedly.
void applyTheme(Preferences::Theme theme);

}  // namespace flotilla::ui
