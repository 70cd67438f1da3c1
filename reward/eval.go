package reward

import (
	"errors"
	"math"
	"math/big"
	"math/cmplx"
	"time"
)

// budget bounds the work of one verification: a step count and a deadline.
// Every evaluator step spends one unit; running out is "not equivalent".
type budget struct {
	steps    int
	deadline time.Time
}

var errBudget = errors.New("verification budget exhausted")

func (b *budget) spend() error {
	b.steps--
	if b.steps < 0 {
		return errBudget
	}
	if b.steps%256 == 0 && time.Now().After(b.deadline) {
		return errBudget
	}
	return nil
}

// maxExactBits bounds the size of exact intermediate results; beyond it an
// expression is compared numerically (10^100000 becomes +Inf and matches
// nothing finite).
const maxExactBits = 8192

var errNotExact = errors.New("not exactly computable")

// exact evaluates n as an exact rational: numbers, + − × ÷, integer powers,
// factorials and binomials. Anything else (variables, constants,
// functions, roots) is errNotExact.
func exact(n *node, b *budget) (*big.Rat, error) {
	if err := b.spend(); err != nil {
		return nil, err
	}
	switch n.op {
	case "num":
		return n.num, nil
	case "neg":
		v, err := exact(n.kids[0], b)
		if err != nil {
			return nil, err
		}
		return new(big.Rat).Neg(v), nil
	case "+", "*":
		acc := new(big.Rat)
		if n.op == "*" {
			acc.SetInt64(1)
		}
		for _, k := range n.kids {
			v, err := exact(k, b)
			if err != nil {
				return nil, err
			}
			if n.op == "+" {
				acc.Add(acc, v)
			} else {
				acc.Mul(acc, v)
			}
			if bits(acc) > maxExactBits {
				return nil, errNotExact
			}
		}
		return acc, nil
	case "^":
		base, err := exact(n.kids[0], b)
		if err != nil {
			return nil, err
		}
		e, err := exact(n.kids[1], b)
		if err != nil {
			return nil, err
		}
		if !e.IsInt() || !e.Num().IsInt64() {
			return nil, errNotExact
		}
		k := e.Num().Int64()
		if base.Sign() == 0 && k < 0 {
			return nil, errNotExact
		}
		if k == 0 {
			return big.NewRat(1, 1), nil
		}
		abs := k
		if abs < 0 {
			abs = -abs
		}
		if abs > maxExactBits || int64(bits(base))*abs > maxExactBits {
			return nil, errNotExact
		}
		num := new(big.Int).Exp(base.Num(), big.NewInt(abs), nil)
		den := new(big.Int).Exp(base.Denom(), big.NewInt(abs), nil)
		if k < 0 {
			num, den = den, num
		}
		return new(big.Rat).SetFrac(num, den), nil
	case "!":
		v, err := exact(n.kids[0], b)
		if err != nil {
			return nil, err
		}
		if !v.IsInt() || v.Sign() < 0 || !v.Num().IsInt64() || v.Num().Int64() > 500 {
			return nil, errNotExact
		}
		return new(big.Rat).SetInt(new(big.Int).MulRange(1, v.Num().Int64())), nil
	case "binom":
		nv, err := exact(n.kids[0], b)
		if err != nil {
			return nil, err
		}
		kv, err := exact(n.kids[1], b)
		if err != nil {
			return nil, err
		}
		if !nv.IsInt() || !kv.IsInt() || !nv.Num().IsInt64() || !kv.Num().IsInt64() || nv.Num().Int64() > 2000 || nv.Sign() < 0 || kv.Sign() < 0 {
			return nil, errNotExact
		}
		return new(big.Rat).SetInt(new(big.Int).Binomial(nv.Num().Int64(), kv.Num().Int64())), nil
	}
	return nil, errNotExact
}

func bits(r *big.Rat) int { return r.Num().BitLen() + r.Denom().BitLen() }

// numeric evaluates n in complex arithmetic with the given variable values.
func numeric(n *node, env map[string]complex128, b *budget) (complex128, error) {
	if err := b.spend(); err != nil {
		return 0, err
	}
	switch n.op {
	case "num":
		f, _ := n.num.Float64()
		return complex(f, 0), nil
	case "var":
		v, ok := env[n.name]
		if !ok {
			return 0, errors.New("unbound variable")
		}
		return v, nil
	case "const":
		switch n.name {
		case "pi":
			return complex(math.Pi, 0), nil
		case "e":
			return complex(math.E, 0), nil
		case "i":
			return complex(0, 1), nil
		}
	case "inf":
		return complex(math.Inf(1), 0), nil
	case "neg":
		v, err := numeric(n.kids[0], env, b)
		return -v, err
	case "+", "*":
		acc := complex(0, 0)
		if n.op == "*" {
			acc = 1
		}
		for _, k := range n.kids {
			v, err := numeric(k, env, b)
			if err != nil {
				return 0, err
			}
			if n.op == "+" {
				acc += v
			} else {
				acc *= v
			}
		}
		return acc, nil
	case "^":
		base, err := numeric(n.kids[0], env, b)
		if err != nil {
			return 0, err
		}
		e, err := numeric(n.kids[1], env, b)
		if err != nil {
			return 0, err
		}
		return power(base, e), nil
	case "!":
		v, err := numeric(n.kids[0], env, b)
		if err != nil {
			return 0, err
		}
		g, _ := math.Lgamma(real(v) + 1)
		s := 1.0
		if real(v)+1 <= 0 {
			return complex(math.NaN(), 0), nil
		}
		return complex(s*math.Exp(g), 0), nil
	case "binom":
		nv, err := numeric(n.kids[0], env, b)
		if err != nil {
			return 0, err
		}
		kv, err := numeric(n.kids[1], env, b)
		if err != nil {
			return 0, err
		}
		ln := func(x float64) float64 { g, _ := math.Lgamma(x + 1); return g }
		return complex(math.Round(math.Exp(ln(real(nv))-ln(real(kv))-ln(real(nv)-real(kv)))), 0), nil
	case "fn":
		x, err := numeric(n.kids[0], env, b)
		if err != nil {
			return 0, err
		}
		return function(n.name, x), nil
	}
	return 0, errors.New("cannot evaluate " + n.op)
}

// power keeps real results real where they exist: a negative base to an
// odd root ((-8)^(1/3) = -2), as a reader of LaTeX means it.
func power(base, e complex128) complex128 {
	if imag(base) == 0 && imag(e) == 0 && real(base) < 0 {
		if inv := 1 / real(e); math.Abs(inv-math.Round(inv)) < 1e-12 && int64(math.Round(inv))%2 != 0 {
			return complex(-math.Pow(-real(base), real(e)), 0)
		}
		if real(e) == math.Trunc(real(e)) {
			return complex(math.Pow(real(base), real(e)), 0)
		}
	}
	if imag(base) == 0 && imag(e) == 0 && real(base) >= 0 {
		return complex(math.Pow(real(base), real(e)), 0)
	}
	return cmplx.Pow(base, e)
}

func function(name string, x complex128) complex128 {
	switch name {
	case "sin":
		return cmplx.Sin(x)
	case "cos":
		return cmplx.Cos(x)
	case "tan":
		return cmplx.Tan(x)
	case "cot":
		return 1 / cmplx.Tan(x)
	case "sec":
		return 1 / cmplx.Cos(x)
	case "csc":
		return 1 / cmplx.Sin(x)
	case "asin":
		return cmplx.Asin(x)
	case "acos":
		return cmplx.Acos(x)
	case "atan":
		return cmplx.Atan(x)
	case "sinh":
		return cmplx.Sinh(x)
	case "cosh":
		return cmplx.Cosh(x)
	case "tanh":
		return cmplx.Tanh(x)
	case "ln", "log":
		return cmplx.Log(x)
	case "log10":
		return cmplx.Log10(x)
	case "exp":
		return cmplx.Exp(x)
	case "abs":
		return complex(cmplx.Abs(x), 0)
	case "floor":
		return complex(math.Floor(real(x)), math.Floor(imag(x)))
	case "ceil":
		return complex(math.Ceil(real(x)), math.Ceil(imag(x)))
	}
	return complex(math.NaN(), 0)
}

// vars collects the variable names of n.
func vars(n *node, into map[string]bool) {
	if n.op == "var" {
		into[n.name] = true
	}
	for _, k := range n.kids {
		vars(k, into)
	}
}
