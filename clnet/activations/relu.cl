// ReLU: y = max(x, 0). LReLU(a): y = x for x > 0, a x otherwise (a is the leak).
inline TYPE relu_forward(TYPE x, TYPE a, TYPE b) { return fmax(x, (TYPE)0); }
inline TYPE relu_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return x > 0 ? (TYPE)1 : (TYPE)0; }

inline TYPE lrelu_forward(TYPE x, TYPE a, TYPE b) { return x > 0 ? x : a * x; }
inline TYPE lrelu_derivative(TYPE y, TYPE x, TYPE a, TYPE b) { return x > 0 ? (TYPE)1 : a; }
