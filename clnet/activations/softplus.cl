// Softplus: y = log(1 + exp(x)), written as max(x, 0) + log1p(exp(-|x|)) so that exp never
// overflows for large x and small x keep their digits. dy/dx = sigmoid(x).
inline TYPE softplus_forward(TYPE x, TYPE a, TYPE b) { return fmax(x, (TYPE)0) + log1p(exp(-fabs(x))); }
inline TYPE softplus_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return 1 / (1 + exp(-x)); }

// The same on VW lanes at once (Activation.vector_form).
#ifdef VW
inline AVEC softplus_forward_vector(AVEC x, TYPE a, TYPE b) { return fmax(x, (AVEC)(0)) + log1p(exp(-fabs(x))); }
inline AVEC softplus_derivative_vector(AVEC y, AVEC x, TYPE a, TYPE b) { return 1 / (1 + exp(-x)); }
#endif
