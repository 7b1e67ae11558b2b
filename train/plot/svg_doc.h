#pragma once
// The small pieces every hand-written SVG picture of gradflow shares (svg_plot.cpp, svg_chart.cpp):
// number formatting, the document header with its font list and background, label widths.
#include <string>

namespace gf::svg {

// A coordinate with at most two decimals and no trailing zeros ("12.5", "3").
std::string number(double v);
// Opens an <svg> document of the given size with a white background (close it with "</svg>\n").
void open_document(std::string& out, double width, double height);
// Estimated width of a label in em (CJK and Hangul ~1 em, Latin ~0.55): SVG cannot measure text.
double label_width_em(const std::string& text);

}  // namespace gf::svg
