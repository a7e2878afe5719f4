/* source.h — sample sources for the data pipeline: IDX files (Fashion-MNIST and its kin), a
 * seeded synthetic generator of any shape, and word lists as token sequences (language id).
 *
 * A source is immutable once opened, so mst_source_get is safe from any number of threads at once
 * with no locking: the loader's workers all read the same source. Trade-off: the IDX reader keeps
 * the whole split in memory as u8 (47 MB for Fashion-MNIST train) instead of streaming from disk;
 * that is 4x smaller than storing floats and makes random access (shuffling) free. The synthetic
 * source stores nothing per sample: every sample is a pure function of (seed, split, index).
 *
 * Usage:
 *     char err[512];
 *     mst_source *train = mst_source_idx_open(MST_FASHION_MNIST_DIR, "train", err, sizeof err);
 *     if (!train) { fprintf(stderr, "error: %s\n", err); return 2; }
 *     int64_t shape[3];                                  // (C, H, W) = (1, 28, 28)
 *     mst_source_shape(train, shape);
 *     float x[784]; int32_t y;
 *     mst_source_get(train, 0, x, &y);                   // x in [0, 1], y = 9 (ankle boot)
 *     mst_source_free(train);
 */
#ifndef MST_RUNTIME_DATA_SOURCE_H
#define MST_RUNTIME_DATA_SOURCE_H

#include <stddef.h>
#include <stdint.h>

/* Where Debian's `dataset-fashion-mnist` package installs the four .gz files. */
#define MST_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
/* IDX label files hold classes 0..9: the MNIST family (digits, Fashion-MNIST, KMNIST) all have
 * ten. A fixed count, rather than max label + 1, keeps train and test splits agreeing on the
 * number of classes and turns a corrupt label byte into an error instead of an extra class. */
#define MST_IDX_CLASSES 10

/* Where Debian's word list packages (wamerican, wngerman, ...) install their lists. */
#define MST_DICT_DIR "/usr/share/dict"
/* Language identification: en de fr it es pt nl sv, in that label order. */
#define MST_LANGID_CLASSES 8
/* Token ids of text sources: padding, the leading [CLS], an unseen character, then characters. */
enum { MST_TOKEN_PAD = 0, MST_TOKEN_CLS = 1, MST_TOKEN_UNK = 2, MST_TOKEN_FIRST_CHAR = 3 };

/* What a sample's values are: floats in [0, 1] (images), or i32 token ids. Both are 4 bytes, so a
 * loader slot of numel floats holds either. */
typedef enum { MST_SAMPLE_F32, MST_SAMPLE_I32 } mst_sample_type;

typedef struct mst_source mst_source;

/* IDX reader. split is "train" (train-*-idx?-ubyte) or "test" (t10k-*-idx?-ubyte). Each file is
 * read as `<name>.gz` through zlib or, when that does not exist, as the uncompressed `<name>`.
 * Validates magic numbers, dimensions, that image and label counts agree, that exactly the
 * declared bytes are present (neither truncated nor followed by trailing bytes) and that every
 * label is < MST_IDX_CLASSES. On error returns NULL and writes a message naming the file path and
 * the problem into err (err may be NULL). */
mst_source *mst_source_idx_open(const char *dir, const char *split, char *err, size_t errn);

/* Synthetic classification data: n samples of shape (c, h, w) in [0, 1], n_classes classes.
 * Each class has a fixed random prototype image derived from seed alone; sample i of `split` has
 * a label and Gaussian noise derived from (seed, split, i), so a linear model separates the
 * classes well above chance and different splits (0 = train, 1 = test, ...) share prototypes but
 * not samples. Returns NULL on a non-positive size or an allocation failure. */
mst_source *mst_source_synthetic_new(int64_t n, int c, int h, int w, int n_classes, uint64_t seed, int split);
/* Testing knob for the profiler's attribution tests: every sample of this synthetic source costs
 * `us` microseconds of busy work on the thread that reads it (a known, injected loader cost).
 * The samples themselves do not change. */
void mst_source_synthetic_set_delay_us(mst_source *src, int us);

/* Super-resolution pairs from the IDX images of `split`: input = the image downsampled by
 * `factor` with a box filter (1, H/f, W/f), target = the image (1, H, W), both in [0, 1]; the
 * label stays the class. NULL with a message naming the file in err. */
mst_source *mst_source_sr_open(const char *dir, const char *split, int factor, char *err, size_t errn);

/* Language identification from the word lists in dir (MST_DICT_DIR): both splits at once, as
 * they share one vocabulary. Samples are (max_len) i32 token ids ([CLS], characters, padding),
 * labels 0..MST_LANGID_CLASSES-1 (mst_langid_language names them); at most per_language words
 * per language in train and per_language / 9 in test. Words in several lists are dropped
 * (wordlist.c has the rules). 0, or -1 with a message naming the file in err. */
int mst_source_langid_open(const char *dir, int max_len, int64_t per_language, mst_source **train, mst_source **test,
                           char *err, size_t errn);
const char *mst_langid_language(int label);       /* "en", "de", ... */

int64_t mst_source_len(const mst_source *src);
/* Writes (C, H, W) and returns the rank: 3 for images; 1 for token sources, whose (1, 1, L)
 * means one sequence of L tokens. */
int     mst_source_shape(const mst_source *src, int64_t shape[3]);
int     mst_source_rank(const mst_source *src);
mst_sample_type mst_source_sample_type(const mst_source *src);
int     mst_source_vocab(const mst_source *src);                   /* token sources: ids are < vocab; 0 otherwise */
/* Paired sources (super-resolution): floats per target sample, 0 when the target is the label
 * only; its shape (C, H, W); the target of sample `index` into target_out. Thread-safe. */
int64_t mst_source_target_numel(const mst_source *src);
void    mst_source_target_shape(const mst_source *src, int64_t shape[3]);
void    mst_source_get_target(const mst_source *src, int64_t index, float *target_out);
/* Token sources: samples cut to max_len, and distinct words dropped for being in several lists. */
void    mst_source_text_stats(const mst_source *src, int64_t *truncated, int64_t *dropped_shared);
int     mst_source_classes(const mst_source *src);
/* Floats per sample: C * H * W. */
int64_t mst_source_sample_numel(const mst_source *src);
/* Sample `index` (0 <= index < len) as C*H*W floats in [0, 1] (token sources: C*H*W int32 ids
 * written into the same 4-byte slots) and its label. Thread-safe. */
void    mst_source_get(const mst_source *src, int64_t index, float *x_out, int32_t *label_out);
/* Ask the CPU to start loading sample `index`'s stored bytes (a hint: nothing is read or written;
 * IDX images only, other kinds ignore it). The loader calls it for samples it will read soon: a
 * shuffled Fashion-MNIST image is 13 cache lines of a 47 MB array, mostly not in any cache. */
void    mst_source_prefetch(const mst_source *src, int64_t index);
void    mst_source_free(mst_source *src);

#endif
