// Linear(a, b): y = a x + b. With a = 1, b = 0 it is the identity ("None").
inline TYPE linear_forward(TYPE x, TYPE a, TYPE b) { return mad(a, x, b); }
inline TYPE linear_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return a; }

// The same on VW lanes at once (Activation.vector_form).
#ifdef VW
inline VEC linear_forward_vector(VEC x, TYPE a, TYPE b) { return a * x + b; }
inline VEC linear_derivative_vector(VEC y, VEC x, TYPE a, TYPE b) { return (VEC)(a); }
#endif
