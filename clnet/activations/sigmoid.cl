// Sigmoid(a, b): y = a / (1 + exp(-x)) - b, a scaled and shifted logistic.
inline TYPE sigmoid_forward(TYPE x, TYPE a, TYPE b) { return a / (1 + exp(-x)) - b; }

// With s = 1 / (1 + exp(-x)) = (y + b) / a, dy/dx = a s (1 - s). Computed from x, not y,
// so that it stays exact where y + b rounds to 0 or a.
inline TYPE sigmoid_derivative(TYPE y, TYPE x, TYPE a, TYPE b)
{
    const TYPE s = 1 / (1 + exp(-x));
    return a * s * (1 - s);
}
