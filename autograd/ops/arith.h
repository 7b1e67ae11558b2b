#pragma once
// Broadcasting arithmetic on Variables.
#include "autograd/variable.h"

namespace gf {

Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable neg(const Variable& a);
Variable add_scalar(const Variable& a, double s);
Variable mul_scalar(const Variable& a, double s);

inline Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
inline Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
inline Variable operator-(const Variable& a) { return neg(a); }
inline Variable operator+(const Variable& a, double s) { return add_scalar(a, s); }
inline Variable operator+(double s, const Variable& a) { return add_scalar(a, s); }
inline Variable operator-(const Variable& a, double s) { return add_scalar(a, -s); }
inline Variable operator-(double s, const Variable& a) { return add_scalar(neg(a), s); }
inline Variable operator*(const Variable& a, double s) { return mul_scalar(a, s); }
inline Variable operator*(double s, const Variable& a) { return mul_scalar(a, s); }
inline Variable operator/(const Variable& a, double s) { return mul_scalar(a, 1.0 / s); }

}  // namespace gf
