/* sr_bicubic.c — the baselines the super-resolution net must beat: test-split PSNR of the
 * fashion_sr pairs (Fashion-MNIST box-downsampled x2, 14x14 -> 28x28) upsampled back by nearest
 * neighbour, bilinear, and bicubic convolution (Keys 1981) with a = -0.5 (PIL's and MATLAB's)
 * and a = -0.75 (PyTorch's F.interpolate), all with half-pixel centres (align_corners=False)
 * and edge replication; outputs clamped to [0, 1]; PSNR per image, averaged, as the trainer's.
 *
 *     bench_sr_bicubic [--dir /usr/share/datasets/fashion-mnist] [--split test]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/source.h"

typedef enum { NEAREST, BILINEAR, BICUBIC_05, BICUBIC_075, N_METHODS } method;
static const char *const k_names[N_METHODS] = {"nearest", "bilinear", "bicubic a=-0.5 (PIL)", "bicubic a=-0.75 (PyTorch)"};

static double weight(method m, double t) {
    t = fabs(t);
    if (m == BILINEAR) return t < 1 ? 1 - t : 0;
    double a = m == BICUBIC_05 ? -0.5 : -0.75;
    if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
    if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
    return 0;
}

static double at(const float *img, int h, int w, int y, int x) {
    y = y < 0 ? 0 : y >= h ? h - 1 : y;
    x = x < 0 ? 0 : x >= w ? w - 1 : x;
    return img[y * w + x];
}

/* Separable resampling of lo (h, w) to (h f, w f). */
static void upsample(method m, const float *lo, int h, int w, int f, double *out) {
    const int H = h * f, W = w * f, taps = m == BILINEAR ? 1 : 2;
    for (int Y = 0; Y < H; Y++)
        for (int X = 0; X < W; X++) {
            double sy = (Y + 0.5) / f - 0.5, sx = (X + 0.5) / f - 0.5;
            if (m == NEAREST) {
                out[Y * W + X] = at(lo, h, w, Y / f, X / f);
                continue;
            }
            int y0 = (int)floor(sy), x0 = (int)floor(sx);
            double v = 0, wsum = 0;
            for (int dy = -taps + 1; dy <= taps; dy++)
                for (int dx = -taps + 1; dx <= taps; dx++) {
                    double wgt = weight(m, sy - (y0 + dy)) * weight(m, sx - (x0 + dx));
                    v += wgt * at(lo, h, w, y0 + dy, x0 + dx);
                    wsum += wgt;
                }
            out[Y * W + X] = v / wsum;
        }
}

int main(int argc, char **argv) {
    const char *dir = MST_FASHION_MNIST_DIR, *split = "test";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--split") && i + 1 < argc) split = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--dir DIR] [--split train|test]\n", argv[0]);
            return 2;
        }
    }
    char err[512];
    mst_source *s = mst_source_sr_open(dir, split, 2, err, sizeof(err));
    if (!s) {
        fprintf(stderr, "bench_sr_bicubic: %s\n", err);
        return 2;
    }
    int64_t ls[3], hs[3];
    mst_source_shape(s, ls);
    mst_source_target_shape(s, hs);
    const int h = (int)ls[1], w = (int)ls[2], H = (int)hs[1], W = (int)hs[2];
    float *lo = malloc(sizeof(float) * (size_t)(h * w)), *hi = malloc(sizeof(float) * (size_t)(H * W));
    double *up = malloc(sizeof(double) * (size_t)(H * W)), psnr[N_METHODS] = {0};
    if (!lo || !hi || !up) return 2;
    const int64_t n = mst_source_len(s);
    for (int64_t i = 0; i < n; i++) {
        mst_source_get(s, i, lo, NULL);
        mst_source_get_target(s, i, hi);
        for (int m = 0; m < N_METHODS; m++) {
            upsample((method)m, lo, h, w, 2, up);
            double se = 0;
            for (int k = 0; k < H * W; k++) {
                double v = up[k] < 0 ? 0 : up[k] > 1 ? 1 : up[k], d = v - hi[k];
                se += d * d;
            }
            double mse = se / (H * W);
            psnr[m] += mse > 1e-10 ? 10 * log10(1 / mse) : 100;
        }
    }
    printf("fashion_sr %s split (%lld images, %dx%d -> %dx%d), mean per-image PSNR:\n", split, (long long)n, h, w, H, W);
    for (int m = 0; m < N_METHODS; m++) printf("  %-26s %.3f dB\n", k_names[m], psnr[m] / (double)n);
    free(lo);
    free(hi);
    free(up);
    mst_source_free(s);
    return 0;
}
