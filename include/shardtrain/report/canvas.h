// An RGB raster for charts: anti-aliased lines and discs, crisp rectangles, and text in X11's
// public-domain 6x13 bitmap font (src/report/font_6x13.inc). Colours are 0xRRGGBB.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain::report {

class Canvas {
 public:
  static constexpr int kGlyphWidth = 6, kGlyphHeight = 13;

  Canvas(int width, int height, uint32_t background = 0xffffff);
  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<uint8_t>& rgb() const { return rgb_; }
  uint32_t pixel(int x, int y) const;  // 0 outside the canvas

  // Drawing is limited to this rectangle (and the canvas); reset_clip() restores the whole canvas.
  void set_clip(int x, int y, int w, int h);
  void reset_clip();

  void fill(uint32_t color);
  // Pixel (i, j) covers [i, i+1) x [j, j+1), so (i + 0.5, j + 0.5) is its centre. dash > 0 draws
  // dash-pixel strokes with gaps of 0.7 x dash, the pattern continuing along a polyline.
  void line(double x0, double y0, double x1, double y1, uint32_t color, double thickness = 1,
            double dash = 0);
  void polyline(const std::vector<std::pair<double, double>>& points, uint32_t color,
                double thickness = 1, double dash = 0);
  void disc(double cx, double cy, double radius, uint32_t color);
  // Outline of the w x h rectangle at (x, y), the border drawn inside it.
  void rect(int x, int y, int w, int h, uint32_t color, int thickness = 1);
  void fill_rect(int x, int y, int w, int h, uint32_t color);

  // (x, y) is the top-left of the text's box; each glyph is 6*scale x 13*scale pixels.
  void text(int x, int y, const std::string& s, uint32_t color, int scale = 1);
  // Rotated 90 degrees anticlockwise (reads bottom to top), for y-axis labels; (x, y) is the
  // top-left of the rotated box, which is text_height(scale) wide and text_width(s, scale) tall.
  void text_vertical(int x, int y, const std::string& s, uint32_t color, int scale = 1);
  static int text_width(const std::string& s, int scale = 1);
  static int text_height(int scale = 1) { return kGlyphHeight * scale; }

  void save_png(const std::string& path) const;

 private:
  void blend(int x, int y, uint32_t color, double alpha);
  void segment(double x0, double y0, double x1, double y1, uint32_t color, double radius);
  // Calls put(col, row) for every set pixel of s's glyphs, before any rotation or scaling.
  template <typename Put>
  static void for_each_glyph_pixel(const std::string& s, Put put);

  int width_, height_;
  int clip_x0_ = 0, clip_y0_ = 0, clip_x1_, clip_y1_;  // half-open
  std::vector<uint8_t> rgb_;
};

}  // namespace shardtrain::report
