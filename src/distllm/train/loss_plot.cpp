#include "distllm/train/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm {
namespace {

constexpr double kWidth = 820, kHeight = 500;
constexpr double kLeft = 70, kRight = 30, kTop = 70, kBottom = 60;

// "Nice" tick spacing: 1, 2 or 5 times a power of ten, about `target` ticks.
double tick_step(double span, int target) {
  if (span <= 0) return 1;
  double raw = span / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double r = raw / mag;
  return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

std::string fmt_number(double v) {
  double a = std::fabs(v);
  if (a >= 1e9) return strprintf("%.3gG", v / 1e9);
  if (a >= 1e6) return strprintf("%.3gM", v / 1e6);
  if (a >= 1e4) return strprintf("%.3gk", v / 1e3);
  return strprintf("%g", v);
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

}  // namespace

std::string loss_curve_svg(const LossCurve& curve) {
  int64_t smin = INT64_MAX, smax = INT64_MIN;
  double lmin = INFINITY, lmax = -INFINITY;
  double tokens_per_step = 0;
  for (const auto* series : {&curve.train, &curve.val})
    for (const LossPoint& p : *series) {
      if (!std::isfinite(p.loss)) continue;
      smin = std::min(smin, p.step);
      smax = std::max(smax, p.step);
      lmin = std::min(lmin, p.loss);
      lmax = std::max(lmax, p.loss);
      if (p.step > 0 && p.tokens > 0) tokens_per_step = p.tokens / static_cast<double>(p.step);
    }
  std::string svg = strprintf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      kWidth, kHeight, kWidth, kHeight);
  svg += strprintf("<text x=\"%g\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", kLeft,
                   escape(curve.title.empty() ? "training loss" : curve.title).c_str());
  if (smin > smax) return svg + "<text x=\"70\" y=\"120\">no loss values</text>\n</svg>\n";
  if (smax == smin) smax = smin + 1;
  if (lmax - lmin < 1e-6) {
    lmin -= 0.5;
    lmax += 0.5;
  }
  const double pad = (lmax - lmin) * 0.05;
  lmin -= pad;
  lmax += pad;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto X = [&](double step) { return kLeft + pw * (step - smin) / static_cast<double>(smax - smin); };
  auto Y = [&](double loss) { return kTop + ph * (1.0 - (loss - lmin) / (lmax - lmin)); };
  svg += strprintf("<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#444\"/>\n", kLeft,
                   kTop, pw, ph);
  // Grid and ticks: loss on the left, steps below, tokens above.
  double ls = tick_step(lmax - lmin, 6);
  for (double v = std::ceil(lmin / ls) * ls; v <= lmax; v += ls) {
    svg += strprintf("<line x1=\"%g\" x2=\"%g\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>", kLeft, kLeft + pw, Y(v),
                     Y(v));
    svg += strprintf("<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", kLeft - 6, Y(v) + 4,
                     fmt_number(v).c_str());
  }
  double ss = std::max(1.0, std::round(tick_step(static_cast<double>(smax - smin), 8)));
  for (double v = std::ceil(smin / ss) * ss; v <= smax; v += ss) {
    svg += strprintf("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%g\" y2=\"%g\" stroke=\"#e4e4e4\"/>", X(v), X(v), kTop,
                     kTop + ph);
    svg += strprintf("<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n", X(v), kTop + ph + 16,
                     fmt_number(v).c_str());
    if (tokens_per_step > 0)
      svg += strprintf("<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\" fill=\"#666\">%s</text>\n", X(v), kTop - 6,
                       fmt_number(v * tokens_per_step).c_str());
  }
  svg += strprintf("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">optimizer step</text>\n", kLeft + pw / 2,
                   kHeight - 14);
  if (tokens_per_step > 0)
    svg += strprintf("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\" fill=\"#666\">tokens</text>\n", kLeft + pw / 2,
                     kTop - 22);
  svg += strprintf("<text transform=\"translate(18 %g) rotate(-90)\" text-anchor=\"middle\">loss</text>\n",
                   kTop + ph / 2);
  auto polyline = [&](const std::vector<LossPoint>& pts, const char* color, double width, bool dots) {
    std::string s = strprintf("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" points=\"", color, width);
    for (const LossPoint& p : pts)
      if (std::isfinite(p.loss)) s += strprintf("%.1f,%.1f ", X(static_cast<double>(p.step)), Y(p.loss));
    s += "\"/>\n";
    if (dots)
      for (const LossPoint& p : pts)
        if (std::isfinite(p.loss))
          s += strprintf("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", X(static_cast<double>(p.step)),
                         Y(p.loss), color);
    return s + "\n";
  };
  if (!curve.train.empty()) svg += polyline(curve.train, "#1f77b4", 1.5, curve.train.size() < 30);
  if (!curve.val.empty()) svg += polyline(curve.val, "#ff7f0e", 2, true);
  // Legend.
  double lx = kLeft + pw - 150, ly = kTop + 12;
  svg += strprintf("<rect x=\"%g\" y=\"%g\" width=\"140\" height=\"44\" fill=\"white\" stroke=\"#ccc\"/>\n", lx,
                   ly - 4);
  svg += strprintf("<line x1=\"%g\" x2=\"%g\" y1=\"%g\" y2=\"%g\" stroke=\"#1f77b4\" stroke-width=\"2\"/>"
                   "<text x=\"%g\" y=\"%g\">train loss</text>\n",
                   lx + 8, lx + 32, ly + 8, ly + 8, lx + 40, ly + 12);
  svg += strprintf("<line x1=\"%g\" x2=\"%g\" y1=\"%g\" y2=\"%g\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>"
                   "<text x=\"%g\" y=\"%g\">validation loss</text>\n",
                   lx + 8, lx + 32, ly + 28, ly + 28, lx + 40, ly + 32);
  return svg + "</svg>\n";
}

LossCurve read_metrics_file(const std::string& path) {
  std::ifstream in(path);
  DL_CHECK(in.good(), "cannot open metrics file %s", path.c_str());
  LossCurve c;
  c.title = path;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    DL_CHECK(!j.is_discarded() && j.is_object(), "%s:%d: not a JSON object", path.c_str(), n);
    std::string type = j.value("type", "");
    LossPoint p;
    p.step = j.value("step", int64_t{0});
    p.tokens = j.value("tokens", 0.0);
    if (type == "step") {
      DL_CHECK(j.contains("loss") && j["loss"].is_number(), "%s:%d: a step record needs a numeric \"loss\"",
               path.c_str(), n);
      p.loss = j["loss"].get<double>();
      c.train.push_back(p);
    } else if (type == "eval") {
      DL_CHECK(j.contains("val_loss") && j["val_loss"].is_number(),
               "%s:%d: an eval record needs a numeric \"val_loss\"", path.c_str(), n);
      p.loss = j["val_loss"].get<double>();
      c.val.push_back(p);
    } else if (type == "run") {
      if (j.contains("title") && j["title"].is_string()) c.title = j["title"].get<std::string>();
    }
  }
  return c;
}

}  // namespace distllm
