// Tanh: y = tanh(x), dy/dx = 1 - y^2.
inline TYPE tanh_forward(TYPE x, TYPE a, TYPE b) { return tanh(x); }
inline TYPE tanh_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return 1 - y * y; }
