// report_svg.c: inline SVG charts for the report: line charts with nice axis ticks (log scale
// when the values span more than a few decades) and stacked bars for the time breakdown. No
// xmlns, no links: inline SVG in HTML needs neither, and the page must reference nothing.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "log/report_internal.h"

enum { W = 760, H = 300, ML = 72, MR = 20, MT = 34, MB = 46 };

const char *rp_run_color(int i) {
    static const char *const c[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
    return c[i % 10];
}

const char *rp_phase_color(int i) {
    static const char *const c[PHASE_COUNT] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                               "#59a14f", "#edc948", "#b07aa1", "#bab0ac"};
    return c[i % PHASE_COUNT];
}

void html_escape(FILE *o, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", o); break;
        case '<': fputs("&lt;", o); break;
        case '>': fputs("&gt;", o); break;
        case '"': fputs("&quot;", o); break;
        default: fputc(*s, o);
        }
    }
}

// Tick label: 4 significant digits, k/M for large values.
static void tick_label(double v, char *buf, size_t len) {
    double a = fabs(v);
    if (a >= 1e6) snprintf(buf, len, "%.4gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, len, "%.4gk", v / 1e3);
    else snprintf(buf, len, "%.4g", v);
}

static double nice_step(double range) {
    double raw = range / 5, mag = pow(10, floor(log10(raw))), norm = raw / mag;
    return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

typedef struct {
    double lo, hi;
    bool log;
} axis;

static double ax_pos(const axis *a, double v, double p0, double p1) {
    double t = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo)) : (v - a->lo) / (a->hi - a->lo);
    return p0 + t * (p1 - p0);
}

// The tick values of axis a (at most max).
static int ticks(const axis *a, double *out, int max) {
    int n = 0;
    if (a->log) {
        int d0 = (int)floor(log10(a->lo)), d1 = (int)ceil(log10(a->hi));
        bool fine = d1 - d0 <= 2;
        for (int d = d0; d <= d1 && n < max; d++) {
            static const double m[] = {1, 2, 5};
            for (int k = 0; k < (fine ? 3 : 1) && n < max; k++) {
                double v = m[k] * pow(10, d);
                if (v >= a->lo * 0.999 && v <= a->hi * 1.001) out[n++] = v;
            }
        }
        return n;
    }
    double step = nice_step(a->hi - a->lo);
    for (double v = ceil(a->lo / step - 1e-9) * step; v <= a->hi + step * 1e-6 && n < max; v += step)
        out[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    return n;
}

static axis make_axis(double lo, double hi, bool allow_log, bool from_zero) {
    axis a = {lo, hi, false};
    if (!isfinite(lo) || !isfinite(hi)) return (axis){0, 1, false};
    if (allow_log && lo > 0 && hi / lo > 50) {
        a.log = true;
        a.lo = pow(10, floor(log10(lo)));
        a.hi = pow(10, ceil(log10(hi)));
        return a;
    }
    if (from_zero && lo > 0) lo = 0;
    if (hi - lo < 1e-12 * (fabs(hi) + 1)) {  // a flat line (a constant learning rate)
        double pad = fabs(hi) > 0 ? fabs(hi) * 0.5 : 1;
        lo = lo - pad, hi = hi + pad;
        if (from_zero && a.lo >= 0 && lo < 0) lo = 0;
    }
    double step = nice_step(hi - lo);
    a.lo = floor(lo / step) * step;
    a.hi = ceil(hi / step) * step;
    if (a.hi <= a.lo) a.hi = a.lo + step;
    return a;
}

void svg_lines(FILE *o, const char *title, const char *xlabel, const char *ylabel, const rp_series *s, int ns,
               const char *key, bool log_ok) {
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (int k = 0; k < s[i].n; k++) {
            double x = s[i].x[k], y = s[i].y[k];
            if (!isfinite(x) || !isfinite(y)) continue;
            xlo = fmin(xlo, x), xhi = fmax(xhi, x), ylo = fmin(ylo, y), yhi = fmax(yhi, y);
        }
    const int px0 = ML, px1 = W - MR, py0 = H - MB, py1 = MT;
    fprintf(o, "<svg class=\"chart\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"", W, H);
    html_escape(o, title);
    fprintf(o, "\">\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"plot\"/>\n", px0, py1, px1 - px0,
            py0 - py1);
    if (!isfinite(xlo)) {
        fprintf(o, "<text x=\"%d\" y=\"%d\" class=\"empty\">no data</text>\n</svg>\n", W / 2, H / 2);
        return;
    }
    axis ax = make_axis(0, xhi > 0 ? xhi : 1, false, true);
    axis ay = make_axis(ylo, yhi, log_ok, !log_ok && ylo >= 0);
    double t[64];
    char lab[32];
    int nt = ticks(&ay, t, 64);
    for (int i = 0; i < nt; i++) {
        double y = ax_pos(&ay, t[i], py0, py1);
        tick_label(t[i], lab, sizeof lab);
        fprintf(o, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>"
                   "<text x=\"%d\" y=\"%.1f\" class=\"yt\">%s</text>\n",
                px0, px1, y, y, px0 - 6, y + 4, lab);
    }
    nt = ticks(&ax, t, 64);
    for (int i = 0; i < nt; i++) {
        double x = ax_pos(&ax, t[i], px0, px1);
        tick_label(t[i], lab, sizeof lab);
        fprintf(o, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" class=\"grid\"/>"
                   "<text x=\"%.1f\" y=\"%d\" class=\"xt\">%s</text>\n",
                x, x, py1, py0, x, py0 + 16, lab);
    }
    fprintf(o, "<text x=\"%d\" y=\"%d\" class=\"xl\">", (px0 + px1) / 2, H - 8);
    html_escape(o, xlabel);
    fprintf(o, "</text><text transform=\"translate(16 %d) rotate(-90)\" class=\"yl\">", (py0 + py1) / 2);
    html_escape(o, ylabel);
    if (ay.log) fputs(" (log scale)", o);
    fputs("</text>\n", o);
    for (int i = 0; i < ns; i++) {
        if (!s[i].n) continue;
        // At most ~1500 points per line: a long run's records are thinned evenly.
        int stride = s[i].n > 1500 ? (s[i].n + 1499) / 1500 : 1;
        fprintf(o, "<polyline class=\"line\" stroke=\"%s\"%s points=\"", s[i].color,
                s[i].dashed ? " stroke-dasharray=\"6 4\"" : "");
        for (int k = 0; k < s[i].n; k += stride) {
            double x = s[i].x[k], y = s[i].y[k];
            if (!isfinite(x) || !isfinite(y) || (ay.log && y <= 0)) continue;
            fprintf(o, "%.1f,%.1f ", ax_pos(&ax, x, px0, px1), ax_pos(&ay, y, py0, py1));
        }
        fputs("\"><title>", o);
        html_escape(o, s[i].name);
        fputs("</title></polyline>\n", o);
        if (s[i].markers && s[i].n <= 400)
            for (int k = 0; k < s[i].n; k++) {
                double x = s[i].x[k], y = s[i].y[k];
                if (!isfinite(x) || !isfinite(y) || (ay.log && y <= 0)) continue;
                fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.6\" fill=\"%s\"/>", ax_pos(&ax, x, px0, px1),
                        ax_pos(&ay, y, py0, py1), s[i].color);
            }
    }
    if (key) {  // "train|validation": the line styles, top right
        char a[64], b[64];
        const char *bar = strchr(key, '|');
        snprintf(a, sizeof a, "%.*s", bar ? (int)(bar - key) : (int)strlen(key), key);
        snprintf(b, sizeof b, "%s", bar ? bar + 1 : "");
        int x = px1 - 230;
        fprintf(o, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" class=\"key\"/><text x=\"%d\" y=\"%d\" "
                   "class=\"kt\">%s</text>\n", x, x + 26, MT - 14, MT - 14, x + 32, MT - 10, a);
        if (*b)
            fprintf(o, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" class=\"key\" stroke-dasharray=\"6 4\"/>"
                       "<circle cx=\"%d\" cy=\"%d\" r=\"2.6\" fill=\"#444\"/><text x=\"%d\" y=\"%d\" "
                       "class=\"kt\">%s</text>\n", x + 110, x + 136, MT - 14, MT - 14, x + 123, MT - 14, x + 142,
                    MT - 10, b);
    }
    fputs("</svg>\n", o);
}

void svg_breakdown(FILE *o, const char *const *labels, const char *const *colors, int nrows,
                   const double (*phase)[PHASE_COUNT]) {
    const int row = 30, x0 = 230, x1 = W - MR, top = 10, legend = 34;
    int h = top + nrows * row + legend + 10;
    fprintf(o, "<svg class=\"chart\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"Time breakdown\">\n", W, h);
    for (int r = 0; r < nrows; r++) {
        int y = top + r * row;
        double total = 0;
        for (int p = 0; p < PHASE_COUNT; p++) total += fmax(phase[r][p], 0);
        fprintf(o, "<rect x=\"4\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"20\" y=\"%d\" "
                   "class=\"rl\">", y + 7, colors[r], y + 16);
        const char *l = labels[r];
        size_t len = strlen(l);
        if (len > 30) fputs("...", o), l += len - 27;  // keep the end: the timestamp tells runs apart
        html_escape(o, l);
        fputs("</text>\n", o);
        if (total <= 0) {
            fprintf(o, "<text x=\"%d\" y=\"%d\" class=\"rl\">no timing recorded</text>\n", x0, y + 16);
            continue;
        }
        double x = x0;
        for (int p = 0; p < PHASE_COUNT; p++) {
            double w = (x1 - x0) * fmax(phase[r][p], 0) / total;
            if (w <= 0) continue;
            fprintf(o, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>%s: %.3f s "
                       "(%.1f%%)</title></rect>",
                    x, y + 2, w, row - 8, rp_phase_color(p), phase_name(p), phase[r][p], 100 * phase[r][p] / total);
            if (w >= 36)
                fprintf(o, "<text x=\"%.1f\" y=\"%d\" class=\"pct\">%.0f%%</text>", x + w / 2, y + 18,
                        100 * phase[r][p] / total);
            x += w;
            fputc('\n', o);
        }
    }
    int y = top + nrows * row + 14, x = 4;
    for (int p = 0; p < PHASE_COUNT; p++) {
        fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                   "class=\"kt\">%s</text>\n", x, y, rp_phase_color(p), x + 16, y + 10, phase_name(p));
        x += 16 + 7 * (int)strlen(phase_name(p)) + 16;  // ~7 px per character at 11 px
    }
    fputs("</svg>\n", o);
}
