// ReLU: y = max(x, 0). LReLU(a): y = x for x > 0, a x otherwise (a is the leak). By ?:, not fmax()
// or select(), which pip's PoCL 3.0 calls out of line (see min_int in common.cl); NaN gives 0 either way.
inline TYPE relu_forward(TYPE x, TYPE a, TYPE b) { return x > 0 ? x : (TYPE)0; }
inline TYPE relu_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return x > 0 ? (TYPE)1 : (TYPE)0; }

inline TYPE lrelu_forward(TYPE x, TYPE a, TYPE b) { return x > 0 ? x : a * x; }
inline TYPE lrelu_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return x > 0 ? (TYPE)1 : a; }

// The same on VW lanes at once (Activation.vector_form).
#ifdef VW
inline VEC relu_forward_vector(VEC x, TYPE a, TYPE b) { return x > 0 ? x : (VEC)(0); }
inline VEC relu_derivative_vector(VEC y, VEC x, TYPE a, TYPE b) { return x > 0 ? (VEC)(1) : (VEC)(0); }
inline VEC lrelu_forward_vector(VEC x, TYPE a, TYPE b) { return x > 0 ? x : a * x; }
inline VEC lrelu_derivative_vector(VEC y, VEC x, TYPE a, TYPE b) { return x > 0 ? (VEC)(1) : (VEC)(a); }
#endif
