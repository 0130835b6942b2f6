// Line charts as PNG files: a grid of panels, each with axes, 1-2-5 ticks, grid lines, a title,
// axis labels and a legend placed in the plot corner that hides the least data.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain::report {

struct Series {
  std::string name;  // legend entry; an empty name keeps the series out of the legend
  std::vector<double> x,
      y;  // pairs past the shorter vector are ignored; a NaN point breaks the line
  uint32_t color = 0x1f77b4;  // 0xRRGGBB
  bool dashed = false;
  bool markers = false;
};

struct Panel {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  std::optional<double> ymin, ymax;  // fixed y-axis ends; unset ends follow the data
  bool log2_x = false;  // x on a log2 scale with ticks at powers of two (x <= 0 is skipped)
  std::optional<double> yfloor =
      std::nullopt;  // the least value the data can take (a loss: 0): the axis stops there
};

// The y axis' ends for a panel drawn plot_h pixels high: the data's range with 5% headroom,
// widened to 1-2-5 ticks, within ymin/ymax when set and never below yfloor.
std::pair<double, double> y_axis_range(const Panel& p, int plot_h = 300);

// Ticks at multiples of a 1, 2 or 5 x 10^k step that cover [lo, hi]: the first is <= lo, the
// last >= hi, and there are at most max(max_ticks, 2) of them, with the smallest such step.
// lo > hi is swapped, lo == hi is widened; a non-finite end gives no ticks.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks);
// A tick label: as many decimals as `step` needs, and a k/M/G suffix for values from 1,000 up.
std::string format_tick(double value, double step);

// matplotlib's tab10 colours; palette_color(i) wraps around.
const std::vector<uint32_t>& default_palette();
uint32_t palette_color(size_t i);

// Lays the panels out left to right, top to bottom, `columns` per row, each panel_w x panel_h
// pixels, and writes the PNG. Throws runtime::Error when the file cannot be written.
void draw_chart_png(const std::string& path, const std::vector<Panel>& panels, int columns,
                    int panel_w = 640, int panel_h = 400);

}  // namespace shardtrain::report
