// Tanh: y = tanh(x), dy/dx = 1 - y^2. (The prefix is not "tanh": OpenCL compilers may define
// tanh as a macro, which would rename our functions when pasted into a name.)
inline TYPE hyperbolic_tangent_forward(TYPE x, TYPE a, TYPE b) { return tanh(x); }
inline TYPE hyperbolic_tangent_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return 1 - y * y; }

// The same on VW lanes at once (Activation.vector_form): the recurrent layers' gate math.
#ifdef VW
inline AVEC hyperbolic_tangent_forward_vector(AVEC x, TYPE a, TYPE b) { return tanh(x); }
inline AVEC hyperbolic_tangent_derivative_vector(AVEC y, AVEC x, TYPE a, TYPE b) { return 1 - y * y; }
#endif
