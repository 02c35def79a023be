// Swish(b): y = x * sigmoid(b x); dy/dx = s + b y (1 - s) with s = sigmoid(b x).
inline TYPE swish_forward(TYPE x, TYPE a, TYPE b) { return x / (1 + exp(-b * x)); }
inline TYPE swish_derivative(TYPE y, TYPE x, TYPE a, TYPE b)
{
    const TYPE s = 1 / (1 + exp(-b * x));
    return s + b * y * (1 - s);
}

// The same on VW lanes at once (Activation.vector_form).
#ifdef VW
inline AVEC swish_forward_vector(AVEC x, TYPE a, TYPE b) { return x / (1 + exp(-b * x)); }
inline AVEC swish_derivative_vector(AVEC y, AVEC x, TYPE a, TYPE b)
{
    const AVEC s = 1 / (1 + exp(-b * x));
    return s + b * y * (1 - s);
}
#endif
