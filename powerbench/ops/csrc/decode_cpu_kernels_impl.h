// Fused decode-step kernels (see decode_cpu_kernels.h), written once against one ISA path's
// vector helpers and included inside that path's namespace by cpu_isa_<path>.cpp (after
// sparse_cpu_kernels_impl.h). hd and D need not be multiples of the vector width (scalar
// tails, which round exactly as the vector body does).

// Below this many multiply-adds (heads x keys x head_dim) attention runs on the caller.
constexpr int64_t kAttentionParallelMin = int64_t(1) << 16;

template <typename T>
inline float round_to(float v) {  // v rounded to T and back (what a torch op in T returns)
  T t;
  store(&t, v);
  return to_f32(t);
}

template <typename T>
inline V vround_to(V v) {  // the same for a vector, in registers
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    T t[kW];
    vstore(t, v);
    return vload(t);
  }
}

// exp(x) per lane (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, degree-6 polynomial in r,
// times 2^n; ~1 ulp in fp32); exp(x) = inf above 88.72 and 0 below -87.33, as expf.
inline V vexp(V x) {
  const V hi = vset1(88.3762626647949f), lo = vset1(-87.3365447504f);
  const V xc = vmax(vmin(x, hi), lo);
  const V magic = vset1(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const V n = vsub(vadd(vmul(xc, vset1(1.44269504088896341f)), magic), magic);
  V r = vsub(xc, vmul(n, vset1(0.693359375f)));
  r = vsub(r, vmul(n, vset1(-2.12194440e-4f)));
  V p = vset1(1.9875691500e-4f);
  p = vfma(p, r, vset1(1.3981999507e-3f));
  p = vfma(p, r, vset1(8.3334519073e-3f));
  p = vfma(p, r, vset1(4.1665795894e-2f));
  p = vfma(p, r, vset1(1.6666665459e-1f));
  p = vfma(p, r, vset1(5.0000001201e-1f));
  p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
  V e = vmul(p, vpow2n(n));
  e = vselect_gt(x, vset1(88.7228391117f), vset1(__builtin_inff()), e);
  return vselect_lt(x, lo, vzero(), e);
}

template <typename T>
float dot(const T* a, const float* q, int64_t n) {
  V acc0 = vzero(), acc1 = vzero();
  int64_t i = 0;
  for (; i + 2 * kW <= n; i += 2 * kW) {
    acc0 = vfma(vload(a + i), vload(q + i), acc0);
    acc1 = vfma(vload(a + i + kW), vload(q + i + kW), acc1);
  }
  for (; i + kW <= n; i += kW) acc0 = vfma(vload(a + i), vload(q + i), acc0);
  float s = vhsum(vadd(acc0, acc1));
  for (; i < n; ++i) s += to_f32(a[i]) * q[i];
  return s;
}

template <typename T>
void add_scaled(const T* v, float p, float* acc, int64_t n) {  // acc += p * v
  const V pv = vset1(p);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) vstore(acc + i, vfma(vload(v + i), pv, vload(acc + i)));
  for (; i < n; ++i) acc[i] += p * to_f32(v[i]);
}

// scores[t] = (k_t . q) * scale for the keys t < keys of one head (rows of hd in kb): kW
// keys at a time, their kW dot products reduced together by one transposing add tree
// (vsum_lanes) rather than one horizontal sum per key, which on the 16-lane path cost more
// than the multiply-adds for a 64-wide head.
template <typename T>
void key_scores(const T* kb, const float* q, int64_t hd, int64_t keys, float scale,
                float* scores) {
  const int64_t hv = hd / kW * kW;
  const V sv = vset1(scale);
  int64_t t = 0;
  for (; t + kW <= keys; t += kW) {
    V acc[kW];
    for (int j = 0; j < kW; ++j) {
      const T* k = kb + (t + j) * hd;
      V a = vzero();
      for (int64_t d = 0; d < hv; d += kW) a = vfma(vload(k + d), vload(q + d), a);
      acc[j] = a;
    }
    V sum = vsum_lanes(acc);
    if (hv < hd) {  // the head's last hd % kW elements, per key
      float tail[kW];
      for (int j = 0; j < kW; ++j) {
        const T* k = kb + (t + j) * hd;
        float r = 0.0f;
        for (int64_t d = hv; d < hd; ++d) r += to_f32(k[d]) * q[d];
        tail[j] = r;
      }
      sum = vadd(sum, vload(tail));
    }
    vstore(scores + t, vmul(sum, sv));
  }
  for (; t < keys; ++t) scores[t] = dot(kb + t * hd, q, hd) * scale;
}

// s[t] = exp(s[t] - max s) for t < n (the vector exp); returns the sum of the new s
inline float softmax_numerators(float* s, int64_t n) {
  float mx = -INFINITY;
  int64_t t = 0;
  if (n >= kW) {
    V m = vload(s);
    for (t = kW; t + kW <= n; t += kW) m = vmax(m, vload(s + t));
    float lanes[kW];
    vstore(lanes, m);
    for (int i = 0; i < kW; ++i) mx = lanes[i] > mx ? lanes[i] : mx;
  }
  for (; t < n; ++t) mx = s[t] > mx ? s[t] : mx;
  const V mv = vset1(mx);
  V acc = vzero();
  for (t = 0; t + kW <= n; t += kW) {
    const V e = vexp(vsub(vload(s + t), mv));
    vstore(s + t, e);
    acc = vadd(acc, e);
  }
  float sum = vhsum(acc);
  for (; t < n; ++t) {
    s[t] = std::exp(s[t] - mx);
    sum += s[t];
  }
  return sum;
}

// acc[0..hd) = sum_t p[t] v_t for the value rows v_t (hd each, in vb), four keys per pass
// over acc (the same sum order as one key at a time)
template <typename T>
void weighted_values(const T* vb, const float* p, int64_t keys, int64_t hd, float* acc) {
  for (int64_t d = 0; d < hd; ++d) acc[d] = 0.0f;
  int64_t t = 0;
  for (; t + 4 <= keys; t += 4) {
    const T* v[4] = {vb + t * hd, vb + (t + 1) * hd, vb + (t + 2) * hd, vb + (t + 3) * hd};
    const V p0 = vset1(p[t]), p1 = vset1(p[t + 1]), p2 = vset1(p[t + 2]), p3 = vset1(p[t + 3]);
    int64_t d = 0;
    for (; d + kW <= hd; d += kW) {
      V a = vfma(vload(v[0] + d), p0, vload(acc + d));
      a = vfma(vload(v[1] + d), p1, a);
      a = vfma(vload(v[2] + d), p2, a);
      vstore(acc + d, vfma(vload(v[3] + d), p3, a));
    }
    for (; d < hd; ++d) {
      for (int j = 0; j < 4; ++j) acc[d] += p[t + j] * to_f32(v[j][d]);
    }
  }
  for (; t < keys; ++t) add_scaled(vb + t * hd, p[t], acc, hd);
}

// dst[i] = T(T(x[i] * cos[i]) + T(rot[i] * sin[i])) for i in [i0, i1), rot[i] = sign *
// x[i + shift]: one half of HF's rotate-half rotary embedding, operator by operator in T
// (each torch op rounds to T), so fp16 keys and queries match the reference bit for bit.
template <typename T>
inline void rope_half(const T* x, const T* cos, const T* sin, int64_t i0, int64_t i1,
                      int64_t shift, float sign, float* dst) {
  const V sv = vset1(sign);
  int64_t i = i0;
  for (; i + kW <= i1; i += kW) {
    const V a = vround_to<T>(vmul(vload(x + i), vload(cos + i)));
    const V b = vround_to<T>(vmul(vmul(sv, vload(x + i + shift)), vload(sin + i)));
    vstore(dst + i, vround_to<T>(vadd(a, b)));
  }
  for (; i < i1; ++i) {
    const float a = round_to<T>(to_f32(x[i]) * to_f32(cos[i]));
    const float b = round_to<T>(sign * to_f32(x[i + shift]) * to_f32(sin[i]));
    dst[i] = round_to<T>(a + b);
  }
}

template <typename T>
void rope(const T* x, const T* cos, const T* sin, int64_t hd, float* dst) {
  const int64_t half = hd / 2;
  rope_half(x, cos, sin, 0, half, half, -1.0f, dst);
  rope_half(x, cos, sin, half, hd, -half, 1.0f, dst);
}

template <typename T>
void rms_norm_impl(const T* x, const T* w, int64_t R, int64_t D, float eps, T* out) {
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * D;
    T* o = out + r * D;
    V acc = vzero();
    int64_t i = 0;
    for (; i + kW <= D; i += kW) {
      const V v = vload(xr + i);
      acc = vfma(v, v, acc);
    }
    float ss = vhsum(acc);
    for (; i < D; ++i) ss += to_f32(xr[i]) * to_f32(xr[i]);
    const float inv = 1.0f / std::sqrt(ss / float(D) + eps);
    const V iv = vset1(inv);
    int64_t k = 0;
    for (; k + kW <= D; k += kW) {
      const V n = vround_to<T>(vmul(vload(xr + k), iv));  // normalised, in the input's type
      vstore(o + k, w ? vmul(n, vload(w + k)) : n);
    }
    for (; k < D; ++k) {
      const float n = round_to<T>(to_f32(xr[k]) * inv);
      store(o + k, w ? n * to_f32(w[k]) : n);
    }
  }
}

// act(g) * f(u) for one vector of gates and ups, rounded where torch rounds
template <typename T>
inline V gated_lanes(GatedKind kind, V g, V u) {
  if (kind == kSwiGLU) {  // silu(g) = g / (1 + exp(-g)), rounded to T, times u
    const V one = vset1(1.0f);
    return vmul(vround_to<T>(vdiv(g, vadd(one, vexp(vsub(vzero(), g))))), u);
  }
  const V a = vrelu(g);
  return vmul(a, kind == kDReLU ? vrelu(u) : u);
}

void activate_impl(float* a, int64_t n, GatedKind kind) {
  int64_t i = 0;
  if (kind == kSwiGLU) {  // g / (1 + exp(-g))
    const V one = vset1(1.0f);
    for (; i + kW <= n; i += kW) {
      const V g = vload(a + i);
      vstore(a + i, vdiv(g, vadd(one, vexp(vsub(vzero(), g)))));
    }
    for (; i < n; ++i) a[i] = silu(a[i]);
  } else {
    for (; i + kW <= n; i += kW) vstore(a + i, vrelu(vload(a + i)));
    for (; i < n; ++i) a[i] = a[i] > 0.0f ? a[i] : 0.0f;
  }
}

template <typename T>
void gated_act_impl(const T* y, int64_t R, int64_t N, GatedKind kind, T* h) {
  for (int64_t r = 0; r < R; ++r) {
    const T* g = y + r * 2 * N;
    const T* u = g + N;
    T* o = h + r * N;
    int64_t j = 0;
    for (; j + kW <= N; j += kW) vstore(o + j, gated_lanes<T>(kind, vload(g + j), vload(u + j)));
    if (j < N) {  // tail: padded to one vector, so it rounds exactly as the body
      float gt[kW] = {}, ut[kW] = {}, ot[kW];
      for (int64_t i = j; i < N; ++i) {
        gt[i - j] = to_f32(g[i]);
        ut[i - j] = to_f32(u[i]);
      }
      vstore(ot, gated_lanes<T>(kind, vload(gt), vload(ut)));
      for (int64_t i = j; i < N; ++i) store(o + i, ot[i - j]);
    }
  }
}

template <typename T>
void attention_impl(const T* qkv, const T* cos, const T* sin, T* kc, T* vc, int64_t B,
                    int64_t H, int64_t KV, int64_t hd, int64_t max_len, int64_t pos, float scale,
                    T* out, int nt) {
  const int64_t width = (H + 2 * KV) * hd;
  const int64_t group = H / KV;
  std::vector<float> tmp(static_cast<size_t>(hd));
  // 1. the new token's K (rotated) and V into the cache, at row `pos`
  for (int64_t b = 0; b < B; ++b) {
    const T* row = qkv + b * width;
    for (int64_t g = 0; g < KV; ++g) {
      const T* k = row + (H + g) * hd;
      const T* v = row + (H + KV + g) * hd;
      T* kd = kc + ((b * KV + g) * max_len + pos) * hd;
      T* vd = vc + ((b * KV + g) * max_len + pos) * hd;
      if (cos != nullptr) {
        rope(k, cos + b * hd, sin + b * hd, hd, tmp.data());
        for (int64_t i = 0; i < hd; ++i) store(kd + i, tmp[i]);
      } else {
        std::memcpy(kd, k, sizeof(T) * hd);
      }
      std::memcpy(vd, v, sizeof(T) * hd);
    }
  }
  // 2. every (row, query head): scores over keys 0..pos, softmax, weighted sum of values
  const int64_t keys = pos + 1;
  const bool par = nt > 1 && B * H * keys * hd >= kAttentionParallelMin;
  parallel_for(B * H, 1, par ? nt : 1, [&](int64_t i0, int64_t i1, int) {
    thread_local std::vector<float> buf;
    if (static_cast<int64_t>(buf.size()) < keys + 2 * hd) buf.resize(keys + 2 * hd);
    float* scores = buf.data();
    float* q = scores + keys;
    float* acc = q + hd;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / H, h = i % H;
      const T* qh = qkv + b * width + h * hd;
      if (cos != nullptr) {
        rope(qh, cos + b * hd, sin + b * hd, hd, q);
      } else {
        for (int64_t d = 0; d < hd; ++d) q[d] = to_f32(qh[d]);
      }
      const int64_t kvh = b * KV + h / group;
      const T* kb = kc + kvh * max_len * hd;
      const T* vb = vc + kvh * max_len * hd;
      key_scores(kb, q, hd, keys, scale, scores);
      const float sum = softmax_numerators(scores, keys);
      weighted_values(vb, scores, keys, hd, acc);
      const float inv = 1.0f / sum;
      T* o = out + b * H * hd + h * hd;
      for (int64_t d = 0; d < hd; ++d) store(o + d, acc[d] * inv);
    }
  });
}
