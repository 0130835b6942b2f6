#include "shardtrain/report/canvas.h"

#include <algorithm>
#include <cmath>

#include "shardtrain/report/png.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::report {
namespace {
#include "font_6x13.inc"
static_assert(kFontWidth == Canvas::kGlyphWidth && kFontHeight == Canvas::kGlyphHeight,
              "font cell size");

// Distance from (px, py) to the segment (x0, y0)-(x1, y1).
double segment_distance(double px, double py, double x0, double y0, double x1, double y1) {
  const double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
  double t = len2 > 0 ? ((px - x0) * dx + (py - y0) * dy) / len2 : 0;
  t = std::clamp(t, 0.0, 1.0);
  return std::hypot(px - (x0 + t * dx), py - (y0 + t * dy));
}
}  // namespace

Canvas::Canvas(int width, int height, uint32_t background)
    : width_(width), height_(height), clip_x1_(width), clip_y1_(height) {
  if (width <= 0 || height <= 0 || width > 16384 || height > 16384)
    throw runtime::Error("canvas size must be 1..16384 pixels each way, got " +
                         std::to_string(width) + "x" + std::to_string(height));
  rgb_.resize(static_cast<size_t>(width) * height * 3);
  fill(background);
}

uint32_t Canvas::pixel(int x, int y) const {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return 0;
  const uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
}

void Canvas::set_clip(int x, int y, int w, int h) {
  clip_x0_ = std::max(0, x);
  clip_y0_ = std::max(0, y);
  clip_x1_ = std::min(width_, x + w);
  clip_y1_ = std::min(height_, y + h);
}

void Canvas::reset_clip() { set_clip(0, 0, width_, height_); }

void Canvas::fill(uint32_t color) {
  for (size_t i = 0; i < rgb_.size(); i += 3) {
    rgb_[i] = static_cast<uint8_t>(color >> 16);
    rgb_[i + 1] = static_cast<uint8_t>(color >> 8);
    rgb_[i + 2] = static_cast<uint8_t>(color);
  }
}

void Canvas::blend(int x, int y, uint32_t color, double alpha) {
  if (x < clip_x0_ || y < clip_y0_ || x >= clip_x1_ || y >= clip_y1_ || !(alpha > 0)) return;
  alpha = std::min(alpha, 1.0);
  uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  for (int c = 0; c < 3; ++c) {
    const double src = static_cast<double>((color >> (16 - 8 * c)) & 0xff);
    p[c] = static_cast<uint8_t>(std::lround(p[c] * (1 - alpha) + src * alpha));
  }
}

// Coverage falls off linearly over the pixel at the stroke's edge: cheap anti-aliasing, round caps.
void Canvas::segment(double x0, double y0, double x1, double y1, uint32_t color, double radius) {
  const int xa = static_cast<int>(std::floor(std::min(x0, x1) - radius - 1));
  const int xb = static_cast<int>(std::ceil(std::max(x0, x1) + radius + 1));
  const int ya = static_cast<int>(std::floor(std::min(y0, y1) - radius - 1));
  const int yb = static_cast<int>(std::ceil(std::max(y0, y1) + radius + 1));
  for (int y = std::max(ya, clip_y0_); y <= std::min(yb, clip_y1_ - 1); ++y)
    for (int x = std::max(xa, clip_x0_); x <= std::min(xb, clip_x1_ - 1); ++x)
      blend(x, y, color, radius + 0.5 - segment_distance(x + 0.5, y + 0.5, x0, y0, x1, y1));
}

void Canvas::line(double x0, double y0, double x1, double y1, uint32_t color, double thickness,
                  double dash) {
  polyline({{x0, y0}, {x1, y1}}, color, thickness, dash);
}

void Canvas::polyline(const std::vector<std::pair<double, double>>& points, uint32_t color,
                      double thickness, double dash) {
  const double radius = std::max(thickness, 0.5) / 2;
  for (const auto& [x, y] : points)
    if (!std::isfinite(x) || !std::isfinite(y)) return;  // callers split lines at missing values
  if (points.size() == 1)
    segment(points[0].first, points[0].second, points[0].first, points[0].second, color, radius);
  const double on = dash, period = dash * 1.7;
  double phase = 0;  // distance along the dash pattern at the start of the current segment
  for (size_t i = 1; i < points.size(); ++i) {
    const auto [x0, y0] = points[i - 1];
    const auto [x1, y1] = points[i];
    const double len = std::hypot(x1 - x0, y1 - y0);
    if (dash <= 0 || len == 0) {
      segment(x0, y0, x1, y1, color, radius);
      continue;
    }
    for (double s = 0; s < len;) {  // s: distance along this segment
      const double in_period = std::fmod(phase + s, period);
      const double step = std::min(len - s, in_period < on ? on - in_period : period - in_period);
      if (in_period < on) {
        const double a = s / len, b = (s + step) / len;
        segment(x0 + a * (x1 - x0), y0 + a * (y1 - y0), x0 + b * (x1 - x0), y0 + b * (y1 - y0),
                color, radius);
      }
      s += std::max(step, 1e-6);
    }
    phase = std::fmod(phase + len, period);
  }
}

void Canvas::disc(double cx, double cy, double radius, uint32_t color) {
  segment(cx, cy, cx, cy, color, radius);
}

void Canvas::rect(int x, int y, int w, int h, uint32_t color, int thickness) {
  thickness = std::max(1, std::min({thickness, w, h}));
  fill_rect(x, y, w, thickness, color);
  fill_rect(x, y + h - thickness, w, thickness, color);
  fill_rect(x, y, thickness, h, color);
  fill_rect(x + w - thickness, y, thickness, h, color);
}

void Canvas::fill_rect(int x, int y, int w, int h, uint32_t color) {
  for (int j = std::max(y, clip_y0_); j < std::min(y + h, clip_y1_); ++j)
    for (int i = std::max(x, clip_x0_); i < std::min(x + w, clip_x1_); ++i) blend(i, j, color, 1.0);
}

template <typename Put>
void Canvas::for_each_glyph_pixel(const std::string& s, Put put) {
  for (size_t k = 0; k < s.size(); ++k) {
    int c = static_cast<unsigned char>(s[k]);
    if (c < kFontFirst || c > kFontLast) c = '?';  // the font holds printable ASCII only
    for (int row = 0; row < kGlyphHeight; ++row)
      for (int col = 0; col < kGlyphWidth; ++col)
        if (kFont6x13[c - kFontFirst][row] & (0x80 >> col))
          put(static_cast<int>(k) * kGlyphWidth + col, row);
  }
}

void Canvas::text(int x, int y, const std::string& s, uint32_t color, int scale) {
  scale = std::max(scale, 1);
  for_each_glyph_pixel(s, [&](int col, int row) {
    fill_rect(x + col * scale, y + row * scale, scale, scale, color);
  });
}

void Canvas::text_vertical(int x, int y, const std::string& s, uint32_t color, int scale) {
  scale = std::max(scale, 1);
  const int w = text_width(s, 1);
  for_each_glyph_pixel(s, [&](int col, int row) {
    fill_rect(x + row * scale, y + (w - 1 - col) * scale, scale, scale, color);
  });
}

int Canvas::text_width(const std::string& s, int scale) {
  return static_cast<int>(s.size()) * kGlyphWidth * std::max(scale, 1);
}

void Canvas::save_png(const std::string& path) const { write_png(path, width_, height_, rgb_); }

}  // namespace shardtrain::report
