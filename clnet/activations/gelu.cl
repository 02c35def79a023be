// GELU: y = x Φ(x) = x (1 + erf(x / √2)) / 2, the exact form (Keras's default, not the tanh fit).
// dy/dx = Φ(x) + x φ(x), φ(x) = exp(-x² / 2) / √(2π).
// M_SQRT1_2 and the like are doubles in OpenCL C: uncast, `x * M_SQRT1_2` and the erf after it ran in
// double on a GPU, and the tiny GPT's GELU layer's products took far longer than with a
// linear activation (forward, and the weight gradient, taking the derivative).
inline TYPE gelu_forward(TYPE x, TYPE a, TYPE b) { return x * (1 + erf(x * (TYPE)M_SQRT1_2)) / 2; }
inline TYPE gelu_derivative(TYPE y, TYPE x, TYPE a, TYPE b)
{
    return (1 + erf(x * (TYPE)M_SQRT1_2)) / 2 + x * exp(-x * x / 2) * (TYPE)(M_2_SQRTPI * M_SQRT1_2 / 2);
}

// The same on VW lanes at once (Activation.vector_form): Dense's CPU form. PoCL 3.0's scalar erf
// costs an element far more than its erf on float8, and GELU's erf and exp were a large part of
// the tiny GPT's training step (benchmarks/RESULTS.md, activations on vector lanes). In double,
// erf and exp of the whole vector (the library's, ulp-accurate), so that float64 gradient checks
// hold to 1e-6. In float, erf is Eigen's rational fit (generic_fast_erf_float, also XLA's):
// erf(z) = z P(z²) / Q(z²) on z clamped to [-4, 4] (past that erf rounds to ±1 in float), far
// faster than PoCL's own float8 erf. Measured in float against math.erf
// in double (tests/test_kernels.py, a fine grid over [-12, 12]): y within 1.7e-7 max(|x|, 1), dy/dx
// within 1.3e-7 max(|x|, 1), about the rounding error of erf in float times |x|, as in any float
// GELU computed from erf (PyTorch's, Keras's): small values of y (x below about -3) keep few
// correct digits. Numerical Recipes' erfc fit, accurate relatively in that tail, was slower
// too: a tail that does not matter to a network.
#ifdef VW
#ifdef CLNET_FP64
inline AVEC gelu_erf_vector(AVEC z) { return erf(z); }
#else
inline AVEC gelu_erf_vector(AVEC z)
{
    const AVEC limit = (AVEC)(4);
    z = z > limit ? limit : z;  // clamp(), which pip's PoCL 3.0 calls as a library function
    z = z < -limit ? -limit : z;
    const AVEC z2 = z * z;
    AVEC p = z2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
    p = z2 * p - 2.10102402082508e-06f;
    p = z2 * p - 5.69250639462346e-05f;
    p = z2 * p - 7.34990630326855e-04f;
    p = z2 * p - 2.95459980854025e-03f;
    p = z2 * p - 1.60960333262415e-02f;
    AVEC q = z2 * -1.45660718464996e-05f - 2.13374055278905e-04f;
    q = z2 * q - 1.68282697438203e-03f;
    q = z2 * q - 7.37332916720468e-03f;
    q = z2 * q - 1.42647390514189e-02f;
    return z * p / q;
}
#endif
inline AVEC gelu_forward_vector(AVEC x, TYPE a, TYPE b) { return x * (1 + gelu_erf_vector(x * (TYPE)M_SQRT1_2)) / 2; }
inline AVEC gelu_derivative_vector(AVEC y, AVEC x, TYPE a, TYPE b)
{
    return (1 + gelu_erf_vector(x * (TYPE)M_SQRT1_2)) / 2 + x * exp(-x * x / 2) * (TYPE)(M_2_SQRTPI * M_SQRT1_2 / 2);
}
#endif
