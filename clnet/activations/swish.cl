// Swish(b): y = x * sigmoid(b x); dy/dx = s + b y (1 - s) with s = sigmoid(b x).
inline TYPE swish_forward(TYPE x, TYPE a, TYPE b) { return x / (1 + exp(-b * x)); }
inline TYPE swish_derivative(TYPE y, TYPE x, TYPE a, TYPE b)
{
    const TYPE s = 1 / (1 + exp(-b * x));
    return s + b * y * (1 - s);
}
