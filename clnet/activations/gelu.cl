// GELU: y = x Φ(x) = x (1 + erf(x / √2)) / 2, the exact form (Keras's default, not the tanh fit).
// dy/dx = Φ(x) + x φ(x), φ(x) = exp(-x² / 2) / √(2π).
inline TYPE gelu_forward(TYPE x, TYPE a, TYPE b) { return x * (1 + erf(x * M_SQRT1_2)) / 2; }
inline TYPE gelu_derivative(TYPE y, TYPE x, TYPE a, TYPE b)
{
    return (1 + erf(x * M_SQRT1_2)) / 2 + x * exp(-x * x / 2) * (M_2_SQRTPI * M_SQRT1_2 / 2);
}
