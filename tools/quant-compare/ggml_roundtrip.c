/* Quantizes raw float32 rows with ggml's own quantizer (ggml_quantize_chunk, as llama-quantize
 * calls it) and writes them dequantized with ggml's to_float. Built by compare.py against the
 * ggml of a llama.cpp release; never part of mla.cpp.
 *
 *   ggml_roundtrip IN.f32 OUT.f32 N_COLS TYPE [ones]   (TYPE as ggml names it: q4_K, iq2_xxs, ...)
 *
 * Without "ones" no importance matrix is passed (llama-quantize without --imatrix); with it, an
 * importance matrix of all ones (every column equally important).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ggml.h"

int main(int argc, char** argv) {
  if (argc != 5 && !(argc == 6 && strcmp(argv[5], "ones") == 0)) {
    fprintf(stderr, "usage: %s IN.f32 OUT.f32 N_COLS TYPE [ones]\n", argv[0]);
    return 2;
  }
  const long n_cols = atol(argv[3]);
  enum ggml_type type = GGML_TYPE_COUNT;
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* name = ggml_type_name((enum ggml_type)t);
    if (name && strcasecmp(name, argv[4]) == 0) type = (enum ggml_type)t;
  }
  if (type == GGML_TYPE_COUNT || n_cols <= 0 || n_cols % ggml_blck_size(type) != 0) {
    fprintf(stderr, "bad type '%s' or row length %ld\n", argv[4], n_cols);
    return 2;
  }
  FILE* in = fopen(argv[1], "rb");
  if (!in) { perror(argv[1]); return 1; }
  fseek(in, 0, SEEK_END);
  const long n = ftell(in) / (long)sizeof(float);
  fseek(in, 0, SEEK_SET);
  if (n == 0 || n % n_cols != 0) { fprintf(stderr, "%ld floats is not a whole number of rows\n", n); return 1; }
  float* x = malloc(n * sizeof(float));
  float* y = malloc(n * sizeof(float));
  const size_t row_size = ggml_row_size(type, n_cols);
  void* q = malloc(row_size * (n / n_cols));
  if (fread(x, sizeof(float), n, in) != (size_t)n) { fprintf(stderr, "short read\n"); return 1; }
  fclose(in);

  float* imatrix = NULL;
  if (argc == 6) {
    imatrix = malloc(n_cols * sizeof(float));
    for (long c = 0; c < n_cols; ++c) imatrix[c] = 1.0f;
  }
  ggml_quantize_init(type);
  ggml_quantize_chunk(type, x, q, 0, n / n_cols, n_cols, imatrix);
  ggml_get_type_traits(type)->to_float(q, y, n);

  FILE* out = fopen(argv[2], "wb");
  if (!out || fwrite(y, sizeof(float), n, out) != (size_t)n || fclose(out) != 0) { perror(argv[2]); return 1; }
  return 0;
}
