// Linear(a, b): y = a x + b. With a = 1, b = 0 it is the identity ("None").
inline TYPE linear_forward(TYPE x, TYPE a, TYPE b) { return mad(a, x, b); }
inline TYPE linear_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return a; }
