package forward

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// ssmW is a loaded SSM: the projections, the convolution taps [Inner, Conv] and bias,
// A = −exp(A_log) [Inner, State] and D.
type ssmW struct {
	spec                   *SSM
	in, xproj, dtproj, out *linearW
	convW, convB, a, d     []float32
	act                    func(float32) float32
}

func (ws *weights) ssm(H int, s *SSM) (*ssmW, error) {
	w := &ssmW{spec: s, act: activations[s.Act]}
	I, N, K, R := s.Inner, s.State, s.Conv, s.DtRank
	var err error
	for _, l := range []struct {
		dst     **linearW
		spec    Linear
		out, in int
	}{{&w.in, s.In, 2 * I, H}, {&w.xproj, s.XProj, R + 2*N, I}, {&w.dtproj, s.DtProj, I, R}, {&w.out, s.Out, H, I}} {
		if *l.dst, err = ws.linear(l.spec, l.out, l.in); err != nil {
			return nil, err
		}
	}
	if w.convW, err = ws.shaped(s.ConvW, I, 1, K); err != nil {
		return nil, err
	}
	if s.ConvB != "" {
		if w.convB, err = ws.vec(s.ConvB, I); err != nil {
			return nil, err
		}
	}
	alog, err := ws.shaped(s.ALog, I, N)
	if err != nil {
		return nil, err
	}
	w.a = make([]float32, len(alog))
	for i, v := range alog {
		w.a[i] = -float32(math.Exp(float64(v)))
	}
	if w.d, err = ws.vec(s.D, I); err != nil {
		return nil, err
	}
	return w, nil
}

// shaped reads a small tensor whose shape must be dims exactly.
func (ws *weights) shaped(model string, dims ...int) ([]float32, error) {
	t, name, err := ws.tensor(model)
	if err != nil {
		return nil, err
	}
	n := 1
	ok := len(t.Shape) == len(dims)
	for i, d := range dims {
		n *= d
		if ok && t.Shape[i] != int64(d) {
			ok = false
		}
	}
	if !ok {
		return nil, shapeErr(name, t.Shape, dims...)
	}
	return ws.vec(model, n)
}

// ssmRows is how many positions a state-space mixer takes at a time (tests shrink it).
var ssmRows = tokenRows

// ssm runs a state-space mixer over T positions into dst [T, H], a block of positions at a
// time: the convolution's last Conv−1 inputs and the state carry from one block to the
// next, so memory stays one block's whatever T.
func (m *Model) ssm(dst, x []float32, T int, w *ssmW, tpu bool) error {
	s := w.spec
	H, I, N, K, R := m.cfg.Hidden, s.Inner, s.State, s.Conv, s.DtRank
	P := R + 2*N
	step := min(ssmRows(2*I), T)
	hist := make([]float32, (K-1)*I) // the previous K−1 positions' convolution inputs, oldest first
	state := make([]float32, I*N)
	xz := make([]float32, step*2*I)
	u := make([]float32, step*I)
	p := make([]float32, step*P)
	dtr := make([]float32, step*R)
	dt := make([]float32, step*I)
	y := make([]float32, step*I)
	for t0 := 0; t0 < T; t0 += step {
		n := min(step, T-t0)
		if err := linear(xz[:n*2*I], x[t0*H:(t0+n)*H], n, w.in.w, w.in.b, tpu); err != nil {
			return fmt.Errorf("in_proj: %w", err)
		}
		// The causal depthwise convolution: output t sums inputs t−K+1 … t.
		for t := range n {
			for c := range I {
				var acc float32
				if w.convB != nil {
					acc = w.convB[c]
				}
				for j := range K {
					q := t - (K - 1) + j
					var v float32
					if q >= 0 {
						v = xz[q*2*I+c]
					} else {
						v = hist[(K-1+q)*I+c]
					}
					acc += w.convW[c*K+j] * v
				}
				u[t*I+c] = w.act(acc)
			}
		}
		for r := range K - 1 { // keep the last K−1 inputs
			q := n - (K - 1) + r
			if q >= 0 {
				copy(hist[r*I:(r+1)*I], xz[q*2*I:q*2*I+I])
			} else {
				copy(hist[r*I:(r+1)*I], hist[(r+n)*I:(r+n+1)*I])
			}
		}
		if err := linear(p[:n*P], u[:n*I], n, w.xproj.w, w.xproj.b, tpu); err != nil {
			return fmt.Errorf("x_proj: %w", err)
		}
		for t := range n {
			row := p[t*P : (t+1)*P]
			if eps := s.BCDtNorm; eps > 0 {
				rmsNorm(row[:R], row[:R], nil, eps, R)
				rmsNorm(row[R:R+N], row[R:R+N], nil, eps, N)
				rmsNorm(row[R+N:], row[R+N:], nil, eps, N)
			}
			copy(dtr[t*R:(t+1)*R], row[:R])
		}
		if err := linear(dt[:n*I], dtr[:n*R], n, w.dtproj.w, w.dtproj.b, tpu); err != nil {
			return fmt.Errorf("dt_proj: %w", err)
		}
		for i, v := range dt[:n*I] {
			dt[i] = softplus(v)
		}
		m.scan(y, xz, u, dt, p, state, n, w)
		if err := linear(dst[t0*H:(t0+n)*H], y[:n*I], n, w.out.w, w.out.b, tpu); err != nil {
			return fmt.Errorf("out_proj: %w", err)
		}
	}
	return nil
}

// scan advances the state over n positions, channels split among the workers: h =
// exp(Δ·A)·h + (Δ·B)·u, y = h·C + u·D, times act(z).
func (m *Model) scan(y, xz, u, dt, p, state []float32, n int, w *ssmW) {
	s := w.spec
	I, N, R := s.Inner, s.State, s.DtRank
	P := R + 2*N
	workers := max(1, min(runtime.GOMAXPROCS(0), I/64))
	var wg sync.WaitGroup
	for k := range workers {
		c0, c1 := k*I/workers, (k+1)*I/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := c0; c < c1; c++ {
				st := state[c*N : (c+1)*N]
				a := w.a[c*N : (c+1)*N]
				for t := range n {
					d, uu := dt[t*I+c], u[t*I+c]
					b, cc := p[t*P+R:t*P+R+N], p[t*P+R+N:(t+1)*P]
					var acc float32
					for j := range N {
						st[j] = float32(math.Exp(float64(a[j]*d)))*st[j] + d*b[j]*uu
						acc += st[j] * cc[j]
					}
					y[t*I+c] = (acc + uu*w.d[c]) * w.act(xz[t*2*I+I+c])
				}
			}
		}()
	}
	wg.Wait()
}
