// Linear(a, b): y = a x + b. With a = 1, b = 0 it is the identity ("None").
inline TYPE linear_forward(TYPE x, TYPE a, TYPE b) { return mad(a, x, b); }
inline TYPE linear_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return a; }

// The same on VW lanes at once (Activation.vector_form).
#ifdef VW
inline AVEC linear_forward_vector(AVEC x, TYPE a, TYPE b) { return a * x + b; }
inline AVEC linear_derivative_vector(AVEC y, AVEC x, TYPE a, TYPE b) { return (AVEC)(a); }
#endif
