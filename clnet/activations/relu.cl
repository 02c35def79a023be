// ReLU: y = max(x, 0). LReLU(a): y = x for x > 0, a x otherwise (a is the leak). By ?:, not fmax()
// or select(), which pip's PoCL 3.0 calls out of line (see min_int in common.cl); NaN gives 0 either way.
inline TYPE relu_forward(TYPE x, TYPE a, TYPE b) { return x > 0 ? x : (TYPE)0; }
inline TYPE relu_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return x > 0 ? (TYPE)1 : (TYPE)0; }

inline TYPE lrelu_forward(TYPE x, TYPE a, TYPE b) { return x > 0 ? x : a * x; }
inline TYPE lrelu_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return x > 0 ? (TYPE)1 : a; }

// The same on VW lanes at once (Activation.vector_form).
#ifdef VW
inline AVEC relu_forward_vector(AVEC x, TYPE a, TYPE b) { return x > 0 ? x : (AVEC)(0); }
inline AVEC relu_derivative_vector(AVEC y, AVEC x, TYPE a, TYPE b) { return x > 0 ? (AVEC)(1) : (AVEC)(0); }
inline AVEC lrelu_forward_vector(AVEC x, TYPE a, TYPE b) { return x > 0 ? x : a * x; }
inline AVEC lrelu_derivative_vector(AVEC y, AVEC x, TYPE a, TYPE b) { return x > 0 ? (AVEC)(1) : (AVEC)(a); }
#endif
