#include "shardtrain/report/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "shardtrain/report/canvas.h"

namespace shardtrain::report {
namespace {

constexpr uint32_t kInk = 0x262626, kGrid = 0xe5e5e5, kFrame = 0x595959, kLegendBorder = 0xbfbfbf;
constexpr double kLineWidth = 2.2, kMarkerRadius = 3.6, kDash = 7;
constexpr int kTick = 5, kPad = 10, kLegendRow = 17;

using Points = std::vector<std::pair<double, double>>;

// One axis: the data range it spans and its ticks, with labels.
struct Axis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
  std::vector<std::string> labels;
};

std::string fit_text(const std::string& s, int max_px) {
  const int max_chars = std::max(0, max_px / Canvas::kGlyphWidth);
  if (static_cast<int>(s.size()) <= max_chars) return s;
  return max_chars > 3 ? s.substr(0, max_chars - 3) + "..." : s.substr(0, max_chars);
}

bool usable(double x, double y, bool log2_x) {
  return std::isfinite(x) && std::isfinite(y) && (!log2_x || x > 0);
}

Axis x_axis(const Panel& p, int plot_w) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& s : p.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (usable(s.x[i], s.y[i], p.log2_x)) {
        const double v = p.log2_x ? std::log2(s.x[i]) : s.x[i];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
  Axis a;
  if (!(lo <= hi)) {  // no data: a default range
    lo = 0;
    hi = 1;
  }
  if (!p.log2_x) {
    a.ticks = nice_ticks(lo, hi, std::max(2, plot_w / 70));
    a.lo = a.ticks.front();
    a.hi = a.ticks.back();
    for (double t : a.ticks)
      a.labels.push_back(format_tick(t, a.ticks.size() > 1 ? a.ticks[1] - a.ticks[0] : 1));
    return a;
  }
  int e0 = static_cast<int>(std::floor(lo + 1e-9)), e1 = static_cast<int>(std::ceil(hi - 1e-9));
  if (e0 == e1) {
    --e0;
    ++e1;
  }
  const int most = std::max(2, plot_w / 45);
  int stride =
      (e1 - e0 + most - 1) / (most - 1);  // fewest strides that fit, then one that ends on e1
  for (int s = stride; s <= 2 * stride; ++s)
    if ((e1 - e0) % s == 0 && (e1 - e0) / s + 1 >= 3) {
      stride = s;
      break;
    }
  for (int e = e0; e <= e1; e += stride) {
    char buf[32];
    std::snprintf(buf, sizeof buf, e >= 0 ? "%.0f" : "%g",
                  std::ldexp(1.0, e));  // 0.125 needs 3 decimals
    a.ticks.push_back(e);
    a.labels.push_back(buf);
  }
  const double pad = 0.05 * (e1 - e0);  // keeps end markers off the frame
  a.lo = e0 - pad;
  a.hi = e1 + pad;
  return a;
}

Axis y_axis(const Panel& p, int plot_h) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& s : p.series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (usable(s.x[i], s.y[i], p.log2_x)) {
        lo = std::min(lo, s.y[i]);
        hi = std::max(hi, s.y[i]);
      }
  const bool none = !(lo <= hi);
  if (none) {
    lo = 0;
    hi = 1;
  }
  const double pad = none ? 0 : 0.05 * (hi - lo > 0 ? hi - lo : std::max(std::abs(hi), 1.0));
  // Headroom and ticks stop at the floor (data below it, which should not exist, still shows).
  const double floor =
      p.yfloor ? std::min(*p.yfloor, lo) : -std::numeric_limits<double>::infinity();
  lo = p.ymin ? *p.ymin : std::max(lo - pad, floor);  // headroom so data does not sit on the frame
  hi = p.ymax ? *p.ymax : hi + pad;
  Axis a;
  a.ticks = nice_ticks(lo, hi, std::max(2, plot_h / 38));
  const double step = a.ticks.size() > 1 ? a.ticks[1] - a.ticks[0] : 1;
  a.lo = p.ymin ? std::min(*p.ymin, hi) : std::max(a.ticks.front(), floor);
  a.hi = p.ymax ? std::max(*p.ymax, lo) : a.ticks.back();
  if (!(a.hi > a.lo)) a.hi = a.lo + 1;
  std::vector<double> kept;
  for (double t : a.ticks)
    if (t >= a.lo - 1e-9 * step && t <= a.hi + 1e-9 * step) {
      kept.push_back(t);
      a.labels.push_back(format_tick(t, step));
    }
  a.ticks = kept;
  return a;
}

}  // namespace

std::pair<double, double> y_axis_range(const Panel& p, int plot_h) {
  const Axis a = y_axis(p, plot_h);
  return {a.lo, a.hi};
}

namespace {

struct Frame {
  int x0, y0, w, h;  // the plot area in canvas pixels
  Axis x, y;
  bool log2_x;
  double px(double v) const {
    return x0 + ((log2_x ? std::log2(v) : v) - x.lo) / (x.hi - x.lo) * w;
  }
  double py(double v) const { return y0 + h - (v - y.lo) / (y.hi - y.lo) * h; }
  double tick_px(double t) const { return x0 + (t - x.lo) / (x.hi - x.lo) * w; }  // t in axis units
};

// A series as runs of consecutive usable points in canvas pixels (a missing value breaks the line).
std::vector<Points> runs(const Series& s, const Frame& f) {
  std::vector<Points> out(1);
  for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
    if (usable(s.x[i], s.y[i], f.log2_x)) {
      out.back().emplace_back(f.px(s.x[i]), f.py(s.y[i]));
    } else if (!out.back().empty()) {
      out.emplace_back();
    }
  }
  return out;
}

// How much data a legend box at (x, y, w, h) would hide: line samples every 2 pixels, markers x10.
double legend_cost(const std::vector<std::vector<Points>>& all, const std::vector<Series>& series,
                   int x, int y, int w, int h) {
  auto inside = [&](double px, double py) {
    return px >= x - 3 && px <= x + w + 3 && py >= y - 3 && py <= y + h + 3;
  };
  double cost = 0;
  for (size_t k = 0; k < all.size(); ++k)
    for (const auto& pts : all[k])
      for (size_t i = 0; i < pts.size(); ++i) {
        if (series[k].markers && inside(pts[i].first, pts[i].second)) cost += 10;
        if (i == 0) continue;
        const auto [x0, y0] = pts[i - 1];
        const auto [x1, y1] = pts[i];
        const int n = std::max(1, static_cast<int>(std::hypot(x1 - x0, y1 - y0) / 2));
        for (int j = 0; j <= n; ++j)
          cost += inside(x0 + (x1 - x0) * j / n, y0 + (y1 - y0) * j / n) ? 1 : 0;
      }
  return cost;
}

void draw_legend(Canvas& c, const Panel& p, const Frame& f,
                 const std::vector<std::vector<Points>>& all) {
  int text_w = 0, rows = 0;
  for (const auto& s : p.series)
    if (!s.name.empty()) {
      text_w = std::max(text_w, Canvas::text_width(s.name));
      ++rows;
    }
  if (rows == 0) return;
  const int w = 8 + 26 + 6 + text_w + 8, h = 6 + rows * kLegendRow + 2, inset = 8;
  const int xs[] = {f.x0 + inset, f.x0 + f.w - w - inset},
            ys[] = {f.y0 + inset, f.y0 + f.h - h - inset};
  const std::pair<int, int> order[] = {
      {0, 0}, {1, 0}, {1, 1}, {0, 1}};  // top-left, top-right, bottom-right, bottom-left
  int bx = xs[0], by = ys[0];
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [i, j] : order) {
    const double cost = legend_cost(all, p.series, xs[i], ys[j], w, h);
    if (cost < best) {
      best = cost;
      bx = xs[i];
      by = ys[j];
    }
  }
  c.fill_rect(bx, by, w, h, 0xffffff);
  c.rect(bx, by, w, h, kLegendBorder);
  int row = 0;
  for (const auto& s : p.series) {
    if (s.name.empty()) continue;
    const double cy = by + 6 + row * kLegendRow + 6.5;
    c.line(bx + 8, cy, bx + 34, cy, s.color, kLineWidth, s.dashed ? kDash * 0.75 : 0);
    if (s.markers) c.disc(bx + 21, cy, kMarkerRadius, s.color);
    c.text(bx + 40, by + 6 + row * kLegendRow, s.name, kInk);
    ++row;
  }
}

void draw_panel(Canvas& c, const Panel& p, int ox, int oy, int pw, int ph) {
  const int top = kPad + Canvas::text_height() + 10;
  const int bottom = kTick + 4 + Canvas::text_height() + 8 + Canvas::text_height() + kPad;
  const int plot_h = std::max(10, ph - top - bottom);
  const Axis y = y_axis(p, plot_h);
  int label_w = 0;
  for (const auto& l : y.labels) label_w = std::max(label_w, Canvas::text_width(l));
  const int left = kPad + Canvas::text_height() + 8 + label_w + 4 + kTick, right = 24;
  const int plot_w = std::max(10, pw - left - right);
  Frame f{ox + left, oy + top, plot_w, plot_h, x_axis(p, plot_w), y, p.log2_x};

  for (size_t i = 0; i < f.y.ticks.size(); ++i) {
    const int ty = static_cast<int>(std::lround(f.py(f.y.ticks[i]) - 0.5));
    c.fill_rect(f.x0, ty, f.w, 1, kGrid);
    c.fill_rect(f.x0 - kTick, ty, kTick, 1, kFrame);
    c.text(f.x0 - kTick - 4 - Canvas::text_width(f.y.labels[i]), ty - 6, f.y.labels[i], kInk);
  }
  for (size_t i = 0; i < f.x.ticks.size(); ++i) {
    const int tx = static_cast<int>(std::lround(f.tick_px(f.x.ticks[i]) - 0.5));
    c.fill_rect(tx, f.y0, 1, f.h, kGrid);
    c.fill_rect(tx, f.y0 + f.h, 1, kTick, kFrame);
    c.text(tx - Canvas::text_width(f.x.labels[i]) / 2, f.y0 + f.h + kTick + 4, f.x.labels[i], kInk);
  }
  c.rect(f.x0 - 1, f.y0 - 1, f.w + 2, f.h + 2, kFrame);

  const std::string title = fit_text(p.title, pw - 2 * kPad);
  c.text(std::clamp(f.x0 + f.w / 2 - Canvas::text_width(title) / 2, ox + kPad,
                    ox + pw - kPad - Canvas::text_width(title)),
         oy + kPad, title, kInk);
  const std::string xlabel = fit_text(p.xlabel, pw - 2 * kPad);
  c.text(f.x0 + f.w / 2 - Canvas::text_width(xlabel) / 2, oy + ph - kPad - Canvas::text_height(),
         xlabel, kInk);
  const std::string ylabel = fit_text(p.ylabel, f.h);
  c.text_vertical(ox + kPad, f.y0 + f.h / 2 - Canvas::text_width(ylabel) / 2, ylabel, kInk);

  std::vector<std::vector<Points>> all;
  c.set_clip(f.x0 - 5, f.y0 - 5, f.w + 10, f.h + 10);  // markers on the frame stay whole
  for (const auto& s : p.series) {
    all.push_back(runs(s, f));
    for (const auto& pts : all.back()) {
      if (pts.size() > 1) c.polyline(pts, s.color, kLineWidth, s.dashed ? kDash : 0);
      if (s.markers || pts.size() == 1)
        for (const auto& [x, yv] : pts) c.disc(x, yv, kMarkerRadius, s.color);
    }
  }
  c.reset_clip();
  draw_legend(c, p, f, all);
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo <= 1e-12 * std::max(1.0, std::abs(lo))) {
    const double widen = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= widen;
    hi += widen;
  }
  max_ticks = std::max(max_ticks, 2);
  int exp10 = static_cast<int>(std::floor(std::log10((hi - lo) / (max_ticks - 1))));
  for (;; ++exp10) {
    for (int m : {1, 2, 5}) {
      const double scale = std::pow(10.0, std::abs(exp10));
      const double step = exp10 < 0 ? m / scale : m * scale;
      const double k0 = std::floor(lo / step + 1e-9), k1 = std::ceil(hi / step - 1e-9);
      if (k1 - k0 + 1 > max_ticks) continue;
      std::vector<double> ticks;
      for (double k = k0; k <= k1; ++k) {
        const double t =
            exp10 < 0 ? k * m / scale : k * m * scale;  // one rounding, so 0.3 prints as 0.3
        ticks.push_back(t == 0 ? 0.0 : t);
      }
      return ticks;
    }
  }
}

std::string format_tick(double value, double step) {
  step = std::abs(step);
  if (!std::isfinite(value)) return "nan";
  if (!(step > 0) || !std::isfinite(step)) step = std::max(std::abs(value), 1.0);
  if (std::abs(value) < step * 1e-6) return "0";
  double div = 1;
  const char* suffix = "";
  const double mag = std::abs(value);  // per-value units read as 800k, 1M, 1.2M
  if (mag >= 1e9) {
    div = 1e9;
    suffix = "G";
  } else if (mag >= 1e6) {
    div = 1e6;
    suffix = "M";
  } else if (mag >= 1e3) {
    div = 1e3;
    suffix = "k";
  }
  const int decimals = std::max(0, static_cast<int>(std::ceil(-std::log10(step / div) - 1e-9)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 12), value / div);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {  // 1.50 -> 1.5, 2.0 -> 2
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  return s + suffix;
}

const std::vector<uint32_t>& default_palette() {
  static const std::vector<uint32_t> p = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                          0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
  return p;
}

uint32_t palette_color(size_t i) { return default_palette()[i % default_palette().size()]; }

void draw_chart_png(const std::string& path, const std::vector<Panel>& panels, int columns,
                    int panel_w, int panel_h) {
  const int n = std::max<int>(1, static_cast<int>(panels.size()));
  const int cols = std::clamp(columns, 1, n), rows = (n + cols - 1) / cols;
  Canvas c(cols * panel_w, rows * panel_h);
  for (size_t i = 0; i < panels.size(); ++i)
    draw_panel(c, panels[i], static_cast<int>(i % cols) * panel_w,
               static_cast<int>(i / cols) * panel_h, panel_w, panel_h);
  c.save_png(path);
}

}  // namespace shardtrain::report
