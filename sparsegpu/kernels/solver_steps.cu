// The solvers' fused vector and scalar steps (CG, BiCGSTAB, MINRES, LSQR): one device
// function per step, named as the step (`solver_steps::cg_update` is the arithmetic of
// `VectorOps.cg_update`, whose NumPy branch is its host twin). Each runs inside a
// `cupy.ElementwiseKernel` whose operation is the one call of its step
// (`sparsegpu.linalg._vector`): CuPy broadcasts the 0-d device scalars and picks `T` (the
// vectors' value type, real or complex) and `V` (its real type) from the arrays, so an
// iteration launches back to back and never waits for the host. The vector steps are O(n)
// work; the scalar ones (the stopping tests, MINRES's and LSQR's recurrences) run on one
// thread. `T` is a template parameter here, so one text serves every value type; the
// recurrences follow scipy's `minres` and `lsqr` line for line.
// Read as a preamble: CuPy's `complex` (a copy of thrust's) is in scope, as is the CI
// compile check's (`tools/check_kernels.py`, which compiles every step for each value type).

namespace solver_steps {

// Re(x) of a real or complex value
template <typename T>
__device__ __forceinline__ T real_part(T x) {
  return x;
}
template <typename T>
__device__ __forceinline__ T real_part(complex<T> x) {
  return x.real();
}

// |x| as a double
template <typename T>
__device__ __forceinline__ double magnitude(T x) {
  return fabs((double)x);
}
template <typename T>
__device__ __forceinline__ double magnitude(complex<T> x) {
  return (double)abs(x);
}

// ------------------------------------------------------------------------------- CG
// top of a CG iteration: converged (for good) once ||r|| < atol
template <typename T>
__device__ void cg_check(T rr, double atol, bool& active, bool& converged) {
  active = !converged && !(sqrt((double)real_part(rr)) < atol); converged = !active;
}

// p = z + beta p with beta = rho / rho_prev (p = z on the first iteration)
template <typename T>
__device__ void cg_direction(T z, T rho, T rho_prev, bool active, bool first, T& p) {
  if (active) p = first ? z : z + (rho / rho_prev) * p;
}

// x += alpha p, r -= alpha q with alpha = rho / (p . q)
template <typename T>
__device__ void cg_update(T p, T q, T rho, T pq, bool active, T& x, T& r) {
  if (active) { T alpha = rho / pq; x += alpha * p; r -= alpha * q; }
}

// rho_prev = rho and one more iteration counted, where the iteration ran
template <typename T>
__device__ void keep(T rho, bool active, T& rho_prev, long long& count) {
  if (active) { rho_prev = rho; count += 1; }
}

// y +- a v where flag (every solver)
template <typename T>
__device__ void masked_axpy(T a, T v, bool flag, bool subtract, T& y) {
  if (flag) y = subtract ? y - a * v : y + a * v;
}

// ------------------------------------------------------------------------- BiCGSTAB
// top: status 1 once ||r|| < tol, -10 when rho vanished, -11 when omega did
template <typename T>
__device__ void bicg_check(T rr, T rho, T omega, double tol, double rhotol, double omegatol,
                           bool first, int& status, bool& active) {
  if (status == 0) {
    if (sqrt(magnitude(rr)) < tol) status = 1;
    else if (magnitude(rho) < rhotol) status = -10;
    else if (!first && magnitude(omega) < omegatol) status = -11;
  }
  active = status == 0;
}

// p = r (first) or r + beta (p - omega v), beta = (rho / rho_prev) (alpha / omega)
template <typename T>
__device__ void bicg_direction(T r, T v, T rho, T rho_prev, T alpha, T omega, bool active,
                               bool first, T& p) {
  if (active) p = first ? r : (p - omega * v) * ((rho / rho_prev) * (alpha / omega)) + r;
}

// alpha = rho / rv (rv = 0 read as 1: the breakdown is caught after)
template <typename T>
__device__ void bicg_alpha(T rho, T rv, bool active, T& alpha) {
  if (active) alpha = rho / (rv == (T)0 ? (T)1 : rv);
}

// after s = r - alpha v: -11 when rv was 0, 1 when ||s|| < tol; stepped: x takes
// alpha phat; going: the second half runs
template <typename T>
__device__ void bicg_middle(T rv, T ss, double tol, bool active, int& status, bool& stepped,
                            bool& going) {
  stepped = active && !(rv == (T)0);
  if (active) {
    if (rv == (T)0) status = -11;
    else if (sqrt(magnitude(ss)) < tol) status = 1;
  }
  going = active && status == 0;
}

// omega = tr / tt and rho_prev = rho where going; one more iteration counted where stepped
template <typename T>
__device__ void bicg_omega(T tr, T tt, T rho, bool going, bool stepped, T& omega, T& rho_prev,
                           long long& count) {
  if (going) { omega = tr / tt; rho_prev = rho; } if (stepped) count += 1;
}

// --------------------------------------------------------------------------- MINRES
// v = y / beta (as y * (1 / beta), scipy's)
template <typename T>
__device__ void minres_scale(T y, double beta, bool active, T& v) {
  if (active) v = y * (T)(1.0 / beta);
}

// y = A v - shift v - (beta / oldb) r1 (the last term from the second iteration on)
template <typename T>
__device__ void minres_lanczos(T v, T r1, T shift, double beta, double oldb, bool first,
                               bool active, T& y) {
  if (active && shift != (T)0) y = y - shift * v;
  if (active && !first) y = y - (T)(beta / oldb) * r1;
}

// y -= (alfa / beta) r2 with alfa = v . y
template <typename T>
__device__ void minres_orthogonalize(T r2, T vy, double beta, bool active, T& y) {
  if (active) y = y - (T)((double)real_part(vy) / beta) * r2;
}

// scipy's scalar recurrences of one iteration, on one thread; error (and not active) when
// (r2, M r2) came out negative
template <typename T>
__device__ void minres_rotate(T vy, T ry, double eps, double beta1, bool first, double& oldb,
                              double& beta, double& tnorm2, double& dbar, double& epsln,
                              double& cs, double& sn, double& phibar, double& rhs1,
                              double& rhs2, double& gmax, double& gmin, double& oldeps,
                              double& delta, double& root, double& gamma, double& phi,
                              int& istop, bool& active, bool& error) {
  if (active) {
    double alfa = (double)real_part(vy);
    double beta2 = (double)real_part(ry);
    if (beta2 < 0) { error = true; active = false; }
    else {
      oldb = beta;
      beta = sqrt(beta2);
      tnorm2 += alfa * alfa + oldb * oldb + beta * beta;
      if (first && beta / beta1 <= 10 * eps) istop = -1;
      oldeps = epsln;
      delta = cs * dbar + sn * alfa;
      double gbar = sn * dbar - cs * alfa;
      epsln = sn * beta;
      dbar = -cs * beta;
      root = hypot(gbar, dbar);
      gamma = fmax(hypot(gbar, beta), eps);
      cs = gbar / gamma;
      sn = beta / gamma;
      phi = cs * phibar;
      phibar = sn * phibar;
      gmax = fmax(gmax, gamma);
      gmin = fmin(gmin, gamma);
      double z = rhs1 / gamma;
      rhs1 = rhs2 - delta * z;
      rhs2 = -epsln * z;
    }
  }
}

// w = (v - oldeps w1 - delta w2) / gamma, x += phi w
template <typename T>
__device__ void minres_update(T v, T w1, T w2, double oldeps, double delta, double gamma,
                              double phi, bool active, T& w, T& x) {
  if (active) {
    w = (v - (T)oldeps * w1 - (T)delta * w2) * (T)(1.0 / gamma);
    x = x + (T)phi * w;
  }
}

// scipy's stopping tests after an iteration (xx = x . x), on one thread
template <typename T>
__device__ void minres_stop(T xx, double tnorm2, double phibar, double root, double gmax,
                            double gmin, double eps, double beta1, double rtol,
                            long long maxiter, double inf, int& istop, bool& active,
                            long long& itn) {
  if (active) {
    itn += 1;
    double anorm = sqrt(tnorm2);
    double ynorm = sqrt(magnitude(xx));
    double epsx = anorm * ynorm * eps;
    double rnorm = phibar;
    double test1 = (ynorm == 0 || anorm == 0) ? inf : rnorm / (anorm * ynorm);
    double test2 = anorm == 0 ? inf : root / anorm;
    double acond = gmax / gmin;
    if (istop == 0) {
      if (1 + test2 <= 1) istop = 2;
      if (1 + test1 <= 1) istop = 1;
      if (itn >= maxiter) istop = 6;
      if (acond >= 0.1 / eps) istop = 4;
      if (epsx >= beta1) istop = 3;
      if (test2 <= rtol) istop = 2;
      if (test1 <= rtol) istop = 1;
    }
    active = istop == 0;
  }
}

// ----------------------------------------------------------------------------- LSQR
// u = A v - alfa u
template <typename T>
__device__ void lsqr_bidiag(T av, double alfa, bool active, T& u) {
  if (active) u = av - (T)alfa * u;
}

// y *= 1 / c where flag, gate > 0 and c > 0
template <typename T>
__device__ void lsqr_scale(double c, double gate, bool flag, T& y) {
  if (flag && gate > 0 && c > 0) y = y * (T)(1.0 / c);
}

// beta = ||u||, and anorm with it where beta > 0
template <typename T>
__device__ void lsqr_norm_u(T uu, double alfa, double dampsq, bool active, double& beta,
                            double& anorm) {
  if (active) {
    beta = sqrt(magnitude(uu));
    if (beta > 0) anorm = sqrt(anorm * anorm + alfa * alfa + beta * beta + dampsq);
  }
}

// v = A^H u - beta v where beta > 0
template <typename T>
__device__ void lsqr_adjoint(T atu, double beta, bool active, T& v) {
  if (active && beta > 0) v = atu - (T)beta * v;
}

__device__ double sign(double a) { return (a > 0) - (a < 0); }

// scipy's _sym_ortho: (c, s, r) with r = hypot(a, b)
__device__ void sym_ortho(double a, double b, double& c, double& s, double& r) {
  if (b == 0) { c = sign(a); s = 0; r = fabs(a); }
  else if (a == 0) { c = 0; s = sign(b); r = fabs(b); }
  else if (fabs(b) > fabs(a)) {
    double tau = a / b;
    s = sign(b) / sqrt(1 + tau * tau); c = s * tau; r = b / s;
  } else {
    double tau = b / a;
    c = sign(a) / sqrt(1 + tau * tau); s = c * tau; r = a / c;
  }
}

// scipy's LSQR iteration after the two products, on one thread (`_lsqr_recurrences` in
// sparsegpu.linalg._vector is its host twin, line for line)
template <typename T>
__device__ void lsqr_recurrences(T vv, T ww, double damp, double dampsq, double bnorm,
                                 double atol, double btol, double ctol, double eps,
                                 long long iter_lim, double& alfa, double& beta,
                                 double& anorm, double& rhobar, double& phibar,
                                 double& ddnorm, double& res2, double& xnorm,
                                 double& xxnorm, double& z, double& cs2, double& sn2,
                                 double& acond, double& rnorm, double& r1norm,
                                 double& r2norm, double& arnorm, double& t1, double& t2,
                                 double& rho, int& istop, bool& active, bool& stepped,
                                 long long& itn) {
  if (active) {
    itn += 1;
    if (beta > 0) alfa = sqrt(magnitude(vv));
    double wnorm2 = magnitude(ww);
    double rhobar1, psi;
    if (damp > 0) {
      rhobar1 = sqrt(rhobar * rhobar + dampsq);
      double cs1 = rhobar / rhobar1, sn1 = damp / rhobar1;
      psi = sn1 * phibar;
      phibar = cs1 * phibar;
    } else {
      rhobar1 = rhobar;
      psi = 0;
    }
    double cs, sn;
    sym_ortho(rhobar1, beta, cs, sn, rho);
    double theta = sn * alfa;
    rhobar = -cs * alfa;
    double phi = cs * phibar;
    phibar = sn * phibar;
    double tau = sn * phi;
    t1 = phi / rho;
    t2 = -theta / rho;
    ddnorm += wnorm2 / (rho * rho);
    double delta = sn2 * rho, gambar = -cs2 * rho;
    double rhs = phi - delta * z;
    double zbar = rhs / gambar;
    xnorm = sqrt(xxnorm + zbar * zbar);
    double gamma = sqrt(gambar * gambar + theta * theta);
    cs2 = gambar / gamma;
    sn2 = theta / gamma;
    z = rhs / gamma;
    xxnorm += z * z;
    acond = anorm * sqrt(ddnorm);
    res2 += psi * psi;
    rnorm = sqrt(phibar * phibar + res2);
    arnorm = alfa * fabs(tau);
    if (damp > 0) {
      double r1sq = rnorm * rnorm - dampsq * xxnorm;
      r1norm = sqrt(fabs(r1sq)) * (r1sq < 0 ? -1 : 1);
    } else {
      r1norm = rnorm;
    }
    r2norm = rnorm;
    double test1 = rnorm / bnorm;
    double test2 = arnorm / (anorm * rnorm + eps);
    double test3 = 1 / (acond + eps);
    double tt1 = test1 / (1 + anorm * xnorm / bnorm);
    double rtol = btol + atol * anorm * xnorm / bnorm;
    if (itn >= iter_lim) istop = 7;
    if (1 + test3 <= 1) istop = 6;
    if (1 + test2 <= 1) istop = 5;
    if (1 + tt1 <= 1) istop = 4;
    if (test3 <= ctol) istop = 3;
    if (test2 <= atol) istop = 2;
    if (test1 <= rtol) istop = 1;
  }
  stepped = active;
  active = active && istop == 0;
}

// var += |w / rho|^2 (calc_var), x += t1 w, w = v + t2 w
template <typename T, typename V>
__device__ void lsqr_update(T v, double t1, double t2, double rho, bool stepped, bool calc_var,
                            T& w, T& x, V& var) {
  if (stepped) {
    if (calc_var) {
      T q = w * (T)(1.0 / rho);
      double a = magnitude(q);
      var += (V)(a * a);
    }
    x = x + (T)t1 * w;
    w = v + (T)t2 * w;
  }
}

}  // namespace solver_steps
