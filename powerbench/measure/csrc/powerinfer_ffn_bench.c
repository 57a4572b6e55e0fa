// PowerInfer's own CPU FFN operators, timed on this machine: ggml_mul_mat_idx (the up
// projection: rows whose predictor score passes the threshold) and ggml_axpy (the down
// projection over W_down^T rows), fp16 weights, one token, against ggml's dense mul_mat
// over the same matrices, and a plain read of a large buffer on the same threads (the
// machine's read bandwidth in the same process). With fp32 weights only the up projection
// runs (ggml_mul_mat_idx takes any type; this ggml's axpy reads fp16 or Q4_0 rows only).
//
// Written for powerbench; it links against the ggml of a PowerInfer checkout (its ggml.c,
// ggml-quants.c, ggml-alloc.c, ggml-backend.c), compiled by powerbench.measure.powerinfer_ops.
// Each graph runs `layers` layers with their own weights (4096x16384 fp16: 128 MiB per
// matrix, far more than any cache, so every layer streams from DRAM), `passes` times over:
// a graph costs more than its layers (2026-11-27, two threads: a graph of one sparse layer
// took 5.7 ms, 1.4 ms per layer in a graph of 8; this ggml also starts its worker threads
// per graph), and PowerInfer pays that once per token, over every layer of the model. A
// 256 MB read runs before each graph.
//
// Output, one line per measurement (medians over `reps` graphs):
//   read threads <t> gbps <x>
//   op <name> sparsity <s> active <rows per layer-node, mean> ms_per_layer <m> gbps <x>
// with <name> one of sparse_up, sparse_down, sparse_ffn, dense_up, dense_down, dense_ffn.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml.h"

enum { MAX_LAYERS = 64, MAX_THREADS = 256 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* t, int n) {
  qsort(t, n, sizeof(double), by_value);
  return t[n / 2];
}

// ---- the read of a large buffer, split over the threads --------------------------------
struct read_job {
  const uint64_t* p;
  size_t n;
  uint64_t sum;
};

static void* read_part(void* arg) {
  struct read_job* j = arg;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 4 <= j->n; i += 4) {
    s0 += j->p[i];
    s1 += j->p[i + 1];
    s2 += j->p[i + 2];
    s3 += j->p[i + 3];
  }
  j->sum = s0 + s1 + s2 + s3;
  return NULL;
}

static double read_seconds(const uint64_t* buf, size_t n, int nth, uint64_t* sink) {
  pthread_t th[MAX_THREADS];
  struct read_job jobs[MAX_THREADS];
  const size_t per = n / nth / 8 * 8;
  const double t0 = now();
  for (int i = 0; i < nth; ++i) {
    jobs[i] = (struct read_job){buf + i * per, per, 0};
    pthread_create(&th[i], NULL, read_part, &jobs[i]);
  }
  for (int i = 0; i < nth; ++i) {
    pthread_join(th[i], NULL);
    *sink += jobs[i].sum;
  }
  return now() - t0;
}

static void fill(struct ggml_tensor* t, uint32_t seed) {
  const size_t n = (size_t)ggml_nelements(t);
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float v = ((int)(s >> 22) - 512) / 4096.0f;  // [-0.125, 0.125)
    if (t->type == GGML_TYPE_F16) {
      ((ggml_fp16_t*)t->data)[i] = ggml_fp32_to_fp16(v);
    } else {
      ((float*)t->data)[i] = v;
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 9) {
    fprintf(stderr, "usage: %s threads layers passes reps d_model d_ffn f16|f32 sparsity "
            "[sparsity ...]\n", argv[0]);
    return 2;
  }
  const int nth = atoi(argv[1]), layers = atoi(argv[2]), passes = atoi(argv[3]);
  const int reps = atoi(argv[4]), D = atoi(argv[5]), N = atoi(argv[6]);
  const int f16 = strcmp(argv[7], "f16") == 0;
  // ggml_mul_mat_idx gathers rows only above 1000 neurons (ggml.c: src[2]->ne[0] > 1000)
  if (nth < 1 || nth > MAX_THREADS || layers < 1 || layers > MAX_LAYERS || passes < 1 ||
      layers * passes > MAX_LAYERS || reps < 1 || reps > 64 || D < 64 || N <= 1000 ||
      (!f16 && strcmp(argv[7], "f32") != 0)) {
    fprintf(stderr, "threads 1-%d, layers x passes 1-%d, reps 1-64, d_model >= 64, d_ffn > "
            "1000, f16 or f32\n", MAX_THREADS, MAX_LAYERS);
    return 2;
  }
  const enum ggml_type wtype = f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
  const int mats = f16 ? 3 : 1;  // fp32: the up projection alone
  const size_t weights = (size_t)layers * mats * D * N * ggml_type_size(wtype);
  struct ggml_init_params ip = {weights + (size_t)layers * passes * 2 * N * sizeof(float) +
                                ((size_t)64 << 20), NULL, false};
  struct ggml_context* ctx = ggml_init(ip);
  struct ggml_tensor *up[MAX_LAYERS], *down_t[MAX_LAYERS], *down[MAX_LAYERS];
  for (int l = 0; l < layers; ++l) {
    up[l] = ggml_new_tensor_2d(ctx, wtype, D, N);  // N neuron rows of D
    fill(up[l], 3 * l);
    if (!f16) continue;
    down_t[l] = ggml_new_tensor_2d(ctx, wtype, D, N);  // W_down^T: N neuron rows of D
    down[l] = ggml_new_tensor_2d(ctx, wtype, N, D);    // W_down for the dense product
    fill(down_t[l], 3 * l + 1);
    fill(down[l], 3 * l + 2);
  }
  struct ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, 1);
  for (int i = 0; i < D; ++i) ((float*)x->data)[i] = ((i * 37) % 1024 - 512) / 512.0f;
  // each layer-node of a graph has its own active rows (predictor scores, and the down
  // product's input): a pass over the same layers must not find the last pass's rows in
  // the cache (at 95% sparsity 4 layers' active up rows are 27 MB, below a 32 MB L3)
  struct ggml_tensor *h[MAX_LAYERS], *idx[MAX_LAYERS];
  for (int n = 0; n < layers * passes; ++n) {
    h[n] = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, N, 1);
    idx[n] = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, N, 1);
  }
  struct ggml_tensor* gpu = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, N);     // 0: row on the CPU
  memset(gpu->data, 0, sizeof(int32_t) * N);
  sparse_pred_threshold = 0.5f;  // a row is active where its score is >= 0.5

  enum { SPARSE_UP, SPARSE_DOWN, SPARSE_FFN, DENSE_UP, DENSE_DOWN, DENSE_FFN, GRAPHS };
  static const char* names[GRAPHS] = {"sparse_up", "sparse_down", "sparse_ffn",
                                      "dense_up",  "dense_down",  "dense_ffn"};
  struct ggml_cgraph* g[GRAPHS];
  for (int k = 0; k < GRAPHS; ++k) g[k] = (f16 || k == SPARSE_UP || k == DENSE_UP) ?
      ggml_new_graph(ctx) : NULL;
  for (int n = 0; n < layers * passes; ++n) {
    const int l = n % layers;
    ggml_build_forward_expand(g[SPARSE_UP], ggml_mul_mat_idx(ctx, up[l], x, idx[n], gpu));
    ggml_build_forward_expand(g[DENSE_UP], ggml_mul_mat(ctx, up[l], x));
    if (!f16) continue;
    ggml_build_forward_expand(g[SPARSE_DOWN], ggml_axpy(ctx, down_t[l], h[n], idx[n], gpu));
    ggml_build_forward_expand(g[SPARSE_FFN], ggml_mul_mat_idx(ctx, up[l], x, idx[n], gpu));
    ggml_build_forward_expand(g[SPARSE_FFN], ggml_axpy(ctx, down_t[l], h[n], idx[n], gpu));
    ggml_build_forward_expand(g[DENSE_DOWN], ggml_mul_mat(ctx, down[l], h[n]));
    ggml_build_forward_expand(g[DENSE_FFN], ggml_mul_mat(ctx, up[l], x));
    ggml_build_forward_expand(g[DENSE_FFN], ggml_mul_mat(ctx, down[l], h[n]));
  }
  struct ggml_cplan plan[GRAPHS];
  for (int k = 0; k < GRAPHS; ++k) {
    if (!g[k]) continue;
    plan[k] = ggml_graph_plan(g[k], nth);
    plan[k].work_data = plan[k].work_size ? malloc(plan[k].work_size) : NULL;
  }

  const size_t flush_n = ((size_t)256 << 20) / sizeof(uint64_t);  // 256 MB
  uint64_t* flush = malloc(flush_n * sizeof(uint64_t));
  for (size_t i = 0; i < flush_n; ++i) flush[i] = i;
  const size_t read_n = ((size_t)1 << 30) / sizeof(uint64_t);  // 1 GiB
  uint64_t* buf = malloc(read_n * sizeof(uint64_t));
  for (size_t i = 0; i < read_n; ++i) buf[i] = i;
  uint64_t sink = 0;
  double t[64];

  for (int r = 0; r < reps; ++r) t[r] = read_seconds(buf, read_n, nth, &sink);
  printf("read threads %d gbps %.3f\n", nth, read_n * sizeof(uint64_t) / median(t, reps) / 1e9);

  uint32_t s = 12345;
  for (int a = 8; a < argc; ++a) {
    const double sparsity = atof(argv[a]);
    long active = 0;  // over every layer-node
    for (int n = 0; n < layers * passes; ++n) {
      for (int i = 0; i < N; ++i) {
        s = s * 1664525u + 1013904223u;
        const int on = (s >> 8) / 16777216.0 >= sparsity;
        ((float*)idx[n]->data)[i] = on ? 1.0f : 0.0f;
        ((float*)h[n]->data)[i] = on ? 0.25f + (float)((s >> 4) & 255) / 256.0f : 0.0f;
        active += on;
      }
    }
    for (int k = 0; k < GRAPHS; ++k) {
      const int dense = k >= DENSE_UP;
      if (!g[k] || (dense && a > 8)) continue;  // dense graphs: independent of the sparsity
      for (int r = 0; r < reps; ++r) {
        read_seconds(flush, flush_n, nth, &sink);
        const double t0 = now();
        ggml_graph_compute(g[k], &plan[k]);
        t[r] = now() - t0;
      }
      const double m = median(t, reps);
      const double rows = dense ? (double)N * layers * passes : (double)active;  // all nodes
      const double bytes = (k == SPARSE_FFN || k == DENSE_FFN ? 2 : 1) * rows * D *
                           ggml_type_size(wtype);
      printf("op %s sparsity %.4f active %d ms_per_layer %.4f gbps %.3f\n", names[k],
             dense ? 0.0 : sparsity, (int)(rows / (layers * passes) + 0.5),
             m / (layers * passes) * 1e3, bytes / m / 1e9);
    }
  }
  fprintf(stderr, "checksum %llu\n", (unsigned long long)sink);
  return 0;
}
