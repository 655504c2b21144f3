// Float64 references for the backend conformance suite (backend_ops_suite.h): every ComputeOps op
// written as the plainest loops over the same layouts, in double, with no shared code with the
// kernels it checks. Backward references ACCUMULATE (+=) like the ops. Test-only; not fast.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace strata::ops_reference {

using Vec = std::vector<double>;

// out (N, OC) = inp (N, C) @ w (OC, C)^T + bias (OC) (bias empty: none).
inline Vec matmul(const Vec& inp, const Vec& w, const Vec& bias, int64_t N, int64_t C, int64_t OC) {
  Vec out(N * OC);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int64_t c = 0; c < C; ++c) s += inp[n * C + c] * w[o * C + c];
      out[n * OC + o] = s;
    }
  return out;
}

inline void matmul_backward(Vec& dinp, Vec& dw, Vec& dbias, const Vec& dout, const Vec& inp, const Vec& w, int64_t N,
                            int64_t C, int64_t OC) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      const double g = dout[n * OC + o];
      dbias[o] += g;
      for (int64_t c = 0; c < C; ++c) {
        dinp[n * C + c] += g * w[o * C + c];
        dw[o * C + c] += g * inp[n * C + c];
      }
    }
}

// Row statistics of (N, C): mean and rstd = 1 / sqrt(var + eps) (layernorm) or
// 1 / sqrt(mean(x^2) + eps) (rmsnorm, rms = true; mean stays 0).
inline void row_stats(Vec& mean, Vec& rstd, const Vec& x, int64_t N, int64_t C, double eps, bool rms) {
  mean.assign(N, 0.0);
  rstd.assign(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0.0, v = 0.0;
    if (!rms) {
      for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
      m /= C;
    }
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    mean[n] = m;
    rstd[n] = 1.0 / std::sqrt(v / C + eps);
  }
}

// LayerNorm (bias non-empty) or RMSNorm (mean all 0, bias empty): out = xhat * w + b,
// xhat = (x - mean) * rstd.
inline Vec norm_forward(const Vec& x, const Vec& mean, const Vec& rstd, const Vec& w, const Vec& b, int64_t N,
                        int64_t C) {
  Vec out(N * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      out[n * C + c] = (x[n * C + c] - mean[n]) * rstd[n] * w[c] + (b.empty() ? 0.0 : b[c]);
  return out;
}

// dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * w (layernorm), or
// rstd * (g - xhat * mean(g * xhat)) (rmsnorm); dw += sum_n dout * xhat; db += sum_n dout.
inline void norm_backward(Vec& dinp, Vec& dw, Vec& db, const Vec& dout, const Vec& x, const Vec& w, const Vec& mean,
                          const Vec& rstd, int64_t N, int64_t C, bool rms) {
  for (int64_t n = 0; n < N; ++n) {
    double g_mean = 0.0, gx_mean = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double g = dout[n * C + c] * w[c], xhat = (x[n * C + c] - mean[n]) * rstd[n];
      g_mean += g / C;
      gx_mean += g * xhat / C;
    }
    for (int64_t c = 0; c < C; ++c) {
      const double g = dout[n * C + c] * w[c], xhat = (x[n * C + c] - mean[n]) * rstd[n];
      dinp[n * C + c] += rstd[n] * (g - (rms ? 0.0 : g_mean) - xhat * gx_mean);
      dw[c] += dout[n * C + c] * xhat;
      if (!db.empty()) db[c] += dout[n * C + c];
    }
  }
}

inline double gelu(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}
inline double gelu_grad(double x) {
  const double s = std::sqrt(2.0 / M_PI), t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// RoPE "rotate half" on (B, T, NH, HS); inverse = the backward's transpose rotation. Adds into out.
inline void rope(Vec& out, const Vec& x, int64_t B, int64_t T, int64_t NH, int64_t HS, double theta,
                 int64_t pos_offset, bool inverse) {
  const int64_t half = HS / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(pos_offset + t) * std::pow(theta, -2.0 * i / HS);
          const double c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
          const int64_t base = ((b * T + t) * NH + h) * HS;
          const double x1 = x[base + i], x2 = x[base + i + half];
          out[base + i] += x1 * c - x2 * s;
          out[base + i + half] += x2 * c + x1 * s;
        }
}

// Causal GQA attention: q, out (B, T, NH, HS), k, v (B, T, NKV, HS), lse (B, NH, T). When dout is
// non-empty, also the backward: dq, dk, dv +=.
struct Attention {
  int64_t B, T, NH, NKV, HS;
  int64_t qi(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * NH + h) * HS; }
  int64_t ki(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * NKV + h) * HS; }

  void run(Vec& out, Vec& lse, const Vec& q, const Vec& k, const Vec& v, const Vec& dout, Vec& dq, Vec& dk,
           Vec& dv) const {
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    out.assign(B * T * NH * HS, 0.0);
    lse.assign(B * NH * T, 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t kh = h / (NH / NKV);
          Vec p(t + 1);
          double mx = -INFINITY, sum = 0.0;
          for (int64_t j = 0; j <= t; ++j) {
            double s = 0.0;
            for (int64_t d = 0; d < HS; ++d) s += q[qi(b, t, h) + d] * k[ki(b, j, kh) + d];
            p[j] = s * scale;
            mx = std::max(mx, p[j]);
          }
          for (int64_t j = 0; j <= t; ++j) sum += std::exp(p[j] - mx);
          lse[(b * NH + h) * T + t] = mx + std::log(sum);
          for (int64_t j = 0; j <= t; ++j) p[j] = std::exp(p[j] - lse[(b * NH + h) * T + t]);
          for (int64_t j = 0; j <= t; ++j)
            for (int64_t d = 0; d < HS; ++d) out[qi(b, t, h) + d] += p[j] * v[ki(b, j, kh) + d];
          if (dout.empty()) continue;
          Vec dp(t + 1);
          double D = 0.0;
          for (int64_t j = 0; j <= t; ++j) {
            for (int64_t d = 0; d < HS; ++d) dp[j] += dout[qi(b, t, h) + d] * v[ki(b, j, kh) + d];
            D += p[j] * dp[j];
          }
          for (int64_t j = 0; j <= t; ++j) {
            const double ds = p[j] * (dp[j] - D) * scale;
            for (int64_t d = 0; d < HS; ++d) {
              dq[qi(b, t, h) + d] += ds * k[ki(b, j, kh) + d];
              dk[ki(b, j, kh) + d] += ds * q[qi(b, t, h) + d];
              dv[ki(b, j, kh) + d] += p[j] * dout[qi(b, t, h) + d];
            }
          }
        }
  }
};

// lse (N) of logits (N, V) and losses (N) (0 where target == -1).
inline void crossentropy(Vec& lse, Vec& losses, const Vec& logits, const std::vector<int32_t>& targets, int64_t N,
                         int64_t V) {
  lse.assign(N, 0.0);
  losses.assign(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < V; ++i) mx = std::max(mx, logits[n * V + i]);
    for (int64_t i = 0; i < V; ++i) sum += std::exp(logits[n * V + i] - mx);
    lse[n] = mx + std::log(sum);
    if (targets[n] >= 0) losses[n] = lse[n] - logits[n * V + targets[n]];
  }
}

}  // namespace strata::ops_reference
