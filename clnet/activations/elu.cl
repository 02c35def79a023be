// ELU(a): y = x for x > 0, a (exp(x) - 1) otherwise (Keras's elu, alpha = a); dy/dx = 1 or a exp(x).
// expm1 keeps the digits of small negative x, where exp(x) - 1 would cancel.
inline TYPE elu_forward(TYPE x, TYPE a, TYPE b) { return x > 0 ? x : a * expm1(x); }
inline TYPE elu_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return x > 0 ? (TYPE)1 : a * exp(x); }

// The same on VW lanes at once (Activation.vector_form), by ?: (see relu.cl). Lanes of large x take
// exp(x) = inf in the branch ?: drops; a * inf is NaN only for a = 0, also dropped.
#ifdef VW
inline AVEC elu_forward_vector(AVEC x, TYPE a, TYPE b) { return x > 0 ? x : a * expm1(x); }
inline AVEC elu_derivative_vector(AVEC y, AVEC x, TYPE a, TYPE b) { return x > 0 ? (AVEC)(1) : a * exp(x); }
#endif
