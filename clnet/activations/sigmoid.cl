// Sigmoid(a, b): y = a / (1 + exp(-x)) - b, a scaled and shifted logistic.
inline TYPE sigmoid_forward(TYPE x, TYPE a, TYPE b) { return a / (1 + exp(-x)) - b; }

// With s = 1 / (1 + exp(-x)) = (y + b) / a, dy/dx = a s (1 - s). Computed from x, not y,
// so that it stays exact where y + b rounds to 0 or a; but with Keras's a = 1, b = 0, y is s
// itself, bit for bit, and the derivative follows from y (Sigmoid.derivative_from_output).
inline TYPE sigmoid_derivative(TYPE y, TYPE x, TYPE a, TYPE b)
{
    if (a == 1 && b == 0)
        return y * (1 - y);
    const TYPE s = 1 / (1 + exp(-x));
    return a * s * (1 - s);
}

// The same on VW lanes at once (Activation.vector_form): the recurrent layers' gate math.
#ifdef VW
inline AVEC sigmoid_forward_vector(AVEC x, TYPE a, TYPE b) { return a / (1 + exp(-x)) - b; }
inline AVEC sigmoid_derivative_vector(AVEC y, AVEC x, TYPE a, TYPE b)
{
    if (a == 1 && b == 0)  // (as above)
        return y * (1 - y);
    const AVEC s = 1 / (1 + exp(-x));
    return a * s * (1 - s);
}
#endif
