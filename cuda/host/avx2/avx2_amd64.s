#include "textflag.h"

// func adamAVX2(p, gr, m, v *float32, n int, k *AdamConsts)
//
// AdamConsts: GS 0, WD 4, B1 8, OneMinusB1 12, B2 16, OneMinusB2 20, C1 24,
// C2 28, Eps 32, LR 36 (float32), Decoupled 40 (uint32). Each line names
// the Go expression of host.adamLoop it computes; Go's operand order is kept
// for the non-commutative operations (VSUBPS a, b, d is d = b - a).
TEXT ·adamAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ gr+8(FP), SI
	MOVQ m+16(FP), DX
	MOVQ v+24(FP), CX
	MOVQ n+32(FP), BX
	MOVQ k+40(FP), R9
	VBROADCASTSS 0(R9), Y6   // gs
	VBROADCASTSS 4(R9), Y7   // wd
	VBROADCASTSS 8(R9), Y8   // b1
	VBROADCASTSS 12(R9), Y9  // 1-b1
	VBROADCASTSS 16(R9), Y10 // b2
	VBROADCASTSS 20(R9), Y11 // 1-b2
	VBROADCASTSS 24(R9), Y12 // c1
	VBROADCASTSS 28(R9), Y13 // c2
	VBROADCASTSS 32(R9), Y14 // eps
	VBROADCASTSS 36(R9), Y15 // lr
	MOVL 40(R9), R10         // decoupled
	XORQ AX, AX

loop:
	CMPQ AX, BX
	JGE  done
	VMOVUPS (SI)(AX*4), Y0 // gr[i]
	VMULPS  Y6, Y0, Y0     // g := gr[i] * gs
	VMOVUPS (DI)(AX*4), Y1 // p
	TESTL   R10, R10
	JNE     moments
	VMULPS  Y7, Y1, Y2     // wd * p
	VADDPS  Y2, Y0, Y0     // g += wd * p

moments:
	VMOVUPS (DX)(AX*4), Y2 // ms[i]
	VMULPS  Y8, Y2, Y2     // b1*ms[i]
	VMULPS  Y9, Y0, Y3     // omb1*g
	VADDPS  Y3, Y2, Y2     // mi := b1*ms[i] + omb1*g
	VMOVUPS Y2, (DX)(AX*4) // ms[i] = mi
	VMOVUPS (CX)(AX*4), Y3 // vs[i]
	VMULPS  Y10, Y3, Y3    // b2*vs[i]
	VMULPS  Y11, Y0, Y4    // omb2*g
	VMULPS  Y0, Y4, Y4     // omb2*g*g
	VADDPS  Y4, Y3, Y3     // vi := b2*vs[i] + omb2*g*g
	VMOVUPS Y3, (CX)(AX*4) // vs[i] = vi
	VSQRTPS Y3, Y3         // F(math.Sqrt(float64(vi)))
	VMULPS  Y13, Y3, Y3    // ... * c2
	VADDPS  Y14, Y3, Y3    // ... + eps
	VMULPS  Y12, Y2, Y2    // mi * c1
	VDIVPS  Y3, Y2, Y2     // upd := (mi * c1) / (...)
	TESTL   R10, R10
	JEQ     step
	VMULPS  Y7, Y1, Y4     // wd * p
	VADDPS  Y4, Y2, Y2     // upd += wd * p

step:
	VMULPS  Y15, Y2, Y2    // lr*upd
	VSUBPS  Y2, Y1, Y1     // p - lr*upd
	VMOVUPS Y1, (DI)(AX*4) // ps[i] = ...
	ADDQ    $8, AX
	JMP     loop

done:
	VZEROUPPER
	RET

// The exponential of host.expLoop on the four float64 lanes of Y0, in place,
// with Y1 to Y5 for temporaries; R9 holds the *ExpConsts (each constant four
// times over, so that it is an operand straight from memory: Low 0, High 32,
// Scale 64, Round 96, Ln2Hi 128, Ln2Lo 160, C5 192, C4 224, C3 256, C2 288,
// One 320, Mask 352, Table 384) and R8 its Table. A lane outside (Low, High),
// NaN included, jumps to bail with nothing stored, for the Go loop to take
// the four. Each line is the Go expression of expLoop it computes.
#define EXP(bail) \
	VCMPPD    $0x1e, 0(R9), Y0, Y4  /* x > -708 (ordered: false for NaN) */ \
	VCMPPD    $0x11, 32(R9), Y0, Y5 /* x < 709 (ordered) */ \
	VANDPD    Y5, Y4, Y4 \
	VMOVMSKPD Y4, CX \
	CMPL      CX, $15 \
	JNE       bail \
	VMULPD    64(R9), Y0, Y1        /* x*expScale */ \
	VADDPD    96(R9), Y1, Y1        /* t := x*expScale + expRound (kb: its bits) */ \
	VSUBPD    96(R9), Y1, Y2        /* kf := t - expRound */ \
	VMULPD    128(R9), Y2, Y3       /* kf*expLn2Hi */ \
	VSUBPD    Y3, Y0, Y0            /* x - kf*expLn2Hi */ \
	VMULPD    160(R9), Y2, Y3       /* kf*expLn2Lo */ \
	VSUBPD    Y3, Y0, Y0            /* r := x - kf*expLn2Hi - kf*expLn2Lo */ \
	VMULPD    192(R9), Y0, Y2       /* r*(1.0/120) */ \
	VADDPD    224(R9), Y2, Y2       /* 1.0/24 + ... */ \
	VMULPD    Y2, Y0, Y2            /* r*(...) */ \
	VADDPD    256(R9), Y2, Y2       /* 1.0/6 + ... */ \
	VMULPD    Y2, Y0, Y2            /* r*(...) */ \
	VADDPD    288(R9), Y2, Y2       /* 0.5 + ... */ \
	VMULPD    Y2, Y0, Y2            /* r*(...) */ \
	VADDPD    320(R9), Y2, Y2       /* 1 + ... */ \
	VMULPD    Y2, Y0, Y2            /* q := r * (...) */ \
	VPAND     352(R9), Y1, Y3       /* kb&255 */ \
	VPCMPEQQ  Y4, Y4, Y4            /* the gather's mask: every lane */ \
	VXORPD    Y5, Y5, Y5 \
	VGATHERQPD Y4, (R8)(Y3*8), Y5   /* tj := expTable[kb&255] */ \
	VMULPD    Y2, Y5, Y3            /* tj*q */ \
	VADDPD    Y3, Y5, Y3            /* tj + tj*q */ \
	VPSRLQ    $8, Y1, Y1            /* kb>>8 */ \
	VPSLLQ    $52, Y1, Y1           /* (kb>>8)<<52 */ \
	VPADDQ    Y1, Y3, Y0            /* Float64bits(tj+tj*q) + (kb>>8)<<52 */

// func expShiftedSumAVX2(e *float64, row *float32, n int, shift float64, sums *[4]float64, k *ExpConsts) int
//
// host.expShiftedSum four lanes a step: e[j] = exp(float64(row[j]) - shift)
// and sums[j%4] += e[j]; it returns the index of the first step with a
// lane outside (Low, High), or n.
TEXT ·expShiftedSumAVX2(SB), NOSPLIT, $0-56
	MOVQ e+0(FP), DI
	MOVQ row+8(FP), SI
	MOVQ n+16(FP), BX
	VBROADCASTSD shift+24(FP), Y6
	MOVQ sums+32(FP), DX
	MOVQ k+40(FP), R9
	MOVQ 384(R9), R8
	VMOVUPD (DX), Y7 // the four lanes' sums
	XORQ AX, AX

shiftloop:
	CMPQ      AX, BX
	JGE       shiftdone
	VCVTPS2PD (SI)(AX*4), Y0 // float64(v)
	VSUBPD    Y6, Y0, Y0     // float64(v) - shift
	EXP(shiftdone)
	VMOVUPD   Y0, (DI)(AX*8) // e[j]
	VADDPD    Y0, Y7, Y7     // sums[j%4] += e[j]
	ADDQ      $4, AX
	JMP       shiftloop

shiftdone:
	VMOVUPD Y7, (DX)
	VZEROUPPER
	MOVQ AX, ret+48(FP)
	RET

// GELU's 1 + e, e = exp(-2u), of host.geluExp for the four float32 at
// (SI)(AX*4): Y6 is x, Y0 is 1 + e, through EXP (which may jump to bail);
// DX holds the *GELUConsts.
#define GELUDENOM(bail) \
	VCVTPS2PD  (SI)(AX*4), Y6  /* x := float64(v) */ \
	VMULPD     32(DX), Y6, Y0  /* 0.044715*x */ \
	VMULPD     Y6, Y0, Y0      /* 0.044715*x*x */ \
	VMULPD     Y6, Y0, Y0      /* 0.044715*x*x*x */ \
	VADDPD     Y0, Y6, Y0      /* x + 0.044715*x*x*x */ \
	VMULPD     0(DX), Y0, Y0   /* -2 * geluK * (...) */ \
	EXP(bail)                  /* e */ \
	VADDPD     128(DX), Y0, Y0 /* 1 + e */

// GELUConsts: M2K 0 (-2·sqrt(2/π)), C 32 (0.044715), K 64 (sqrt(2/π)), C3
// 96 (3·0.044715), One 128, each four times over.

// func geluAVX2(y, x *float32, n int, gc *GELUConsts, k *ExpConsts) int
//
// host.geluLoop four lanes a step: u := float64(x[i]); e := exp(-2·K·(u +
// C·u·u·u)); y[i] = float32(u * (1 / (1 + e))); it returns where it stopped,
// as expShiftedSumAVX2.
TEXT ·geluAVX2(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), BX
	MOVQ gc+24(FP), DX
	MOVQ k+32(FP), R9
	MOVQ 384(R9), R8
	XORQ AX, AX

geluloop:
	CMPQ       AX, BX
	JGE        geludone
	GELUDENOM(geludone)       // Y6 = x, Y0 = 1 + e
	VMOVUPD    128(DX), Y1
	VDIVPD     Y0, Y1, Y0     // 1 / (1 + e)
	VMULPD     Y0, Y6, Y0     // float64(v) * (...)
	VCVTPD2PSY Y0, X0         // F(...)
	VMOVUPS    X0, (DI)(AX*4)
	ADDQ       $4, AX
	JMP        geluloop

geludone:
	VZEROUPPER
	MOVQ AX, ret+40(FP)
	RET

// func geluBackwardAVX2(dx, dy, x *float32, n int, gc *GELUConsts, k *ExpConsts) int
//
// host.geluBackwardLoop four lanes a step: with u := float64(x[i]), e as
// for geluAVX2 and s := 1 / (1 + e), d := s + 2*u*s*(1-s)*K*(1+C3*u*u) and
// dx[i] = float32(float64(dy[i]) * d); it returns where it stopped, as
// expShiftedSumAVX2.
TEXT ·geluBackwardAVX2(SB), NOSPLIT, $0-56
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), R10
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), BX
	MOVQ gc+32(FP), DX
	MOVQ k+40(FP), R9
	MOVQ 384(R9), R8
	XORQ AX, AX

gelubloop:
	CMPQ       AX, BX
	JGE        gelubdone
	GELUDENOM(gelubdone)      // Y6 = xv, Y0 = 1 + e
	VMOVUPD    128(DX), Y7
	VDIVPD     Y0, Y7, Y7     // s := 1 / (1 + e)
	VADDPD     Y6, Y6, Y1     // 2*xv
	VMULPD     Y7, Y1, Y1     // 2*xv*s
	VMOVUPD    128(DX), Y2
	VSUBPD     Y7, Y2, Y2     // 1-s
	VMULPD     Y2, Y1, Y1     // 2*xv*s*(1-s)
	VMULPD     64(DX), Y1, Y1 // ...*geluK
	VMULPD     96(DX), Y6, Y2 // 3*0.044715*xv
	VMULPD     Y6, Y2, Y2     // 3*0.044715*xv*xv
	VADDPD     128(DX), Y2, Y2 // 1+3*0.044715*xv*xv
	VMULPD     Y2, Y1, Y1     // 2*xv*s*(1-s)*geluK*(1+3*0.044715*xv*xv)
	VADDPD     Y1, Y7, Y1     // d := s + ...
	VCVTPS2PD  (R10)(AX*4), Y2 // float64(ds[i])
	VMULPD     Y1, Y2, Y1     // float64(ds[i]) * d
	VCVTPD2PSY Y1, X1         // F(...)
	VMOVUPS    X1, (DI)(AX*4)
	ADDQ       $4, AX
	JMP        gelubloop

gelubdone:
	VZEROUPPER
	MOVQ AX, ret+48(FP)
	RET

// func addAVX2(y, a, b *float32, n int)
//
// y[i] = a[i] + b[i] for i in [0, n), n a multiple of 8 (host's addKernel
// and addBiasKernel).
TEXT ·addAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), BX
	XORQ AX, AX

addloop:
	CMPQ    AX, BX
	JGE     adddone
	VMOVUPS (SI)(AX*4), Y0
	VADDPS  (DX)(AX*4), Y0, Y0 // a[i] + b[i]
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     addloop

adddone:
	VZEROUPPER
	RET

// func accumulateAVX2(acc *float64, x *float32, n int)
//
// acc[i] += float64(x[i]) for i in [0, n), n a multiple of 4 (host's
// column sums).
TEXT ·accumulateAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), BX
	XORQ AX, AX

accloop:
	CMPQ      AX, BX
	JGE       accdone
	VCVTPS2PD (SI)(AX*4), Y0 // float64(x[i])
	VADDPD    (DI)(AX*8), Y0, Y0 // acc[i] + ...
	VMOVUPD   Y0, (DI)(AX*8)
	ADDQ      $4, AX
	JMP       accloop

accdone:
	VZEROUPPER
	RET

// func roundAVX2(y *float32, x *float64, n int)
//
// y[i] = float32(x[i]) for i in [0, n), n a multiple of 4.
TEXT ·roundAVX2(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), BX
	XORQ AX, AX

roundloop:
	CMPQ       AX, BX
	JGE        rounddone
	VCVTPD2PSY (SI)(AX*8), X0
	VMOVUPS    X0, (DI)(AX*4)
	ADDQ       $4, AX
	JMP        roundloop

rounddone:
	VZEROUPPER
	RET

// func scaleAVX2(y *float32, n int, s float64)
//
// y[i] = float32(float64(y[i]) * s) for i in [0, n), n a multiple of 4.
TEXT ·scaleAVX2(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ n+8(FP), BX
	VBROADCASTSD s+16(FP), Y1
	XORQ AX, AX

scaleloop:
	CMPQ       AX, BX
	JGE        scaledone
	VCVTPS2PD  (DI)(AX*4), Y0 // float64(y[i])
	VMULPD     Y1, Y0, Y0     // ... * s
	VCVTPD2PSY Y0, X0         // float32(...)
	VMOVUPS    X0, (DI)(AX*4)
	ADDQ       $4, AX
	JMP        scaleloop

scaledone:
	VZEROUPPER
	RET

// func layerNormRowAVX2(y, x, w, b *float32, n int, mean, rstd float32)
//
// host's layerNormKernel on one row: y[c] = (x[c]-mean)*rstd*w[c] + b[c]
// for c in [0, n), n a multiple of 8.
TEXT ·layerNormRowAVX2(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ b+24(FP), CX
	MOVQ n+32(FP), BX
	VBROADCASTSS mean+40(FP), Y4
	VBROADCASTSS rstd+44(FP), Y5
	XORQ AX, AX

lnloop:
	CMPQ    AX, BX
	JGE     lndone
	VMOVUPS (SI)(AX*4), Y0
	VSUBPS  Y4, Y0, Y0         // x[c]-mean
	VMULPS  Y5, Y0, Y0         // (x[c]-mean)*rstd
	VMULPS  (DX)(AX*4), Y0, Y0 // ...*w[c]
	VADDPS  (CX)(AX*4), Y0, Y0 // ... + b[c]
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     lnloop

lndone:
	VZEROUPPER
	RET

// func nonFinite32AVX2(w *uint32, n int) bool
//
// host's anyExponentAllOnes for float32 words (exp 0x7f800000): whether
// any of w[0:n], n a multiple of 16, has its exponent all ones; the same
// carry into the sign bit, sixteen words a step in two running ORs.
TEXT ·nonFinite32AVX2(SB), NOSPLIT, $0-17
	MOVQ w+0(FP), SI
	MOVQ n+8(FP), BX
	MOVL $0x7f800000, CX
	MOVQ CX, X6
	VPBROADCASTD X6, Y6 // exp
	MOVL $0x00800000, CX
	MOVQ CX, X7
	VPBROADCASTD X7, Y7 // exp's lowest bit
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	XORQ AX, AX

nfloop:
	CMPQ    AX, BX
	JGE     nfdone
	VPAND   (SI)(AX*4), Y6, Y0   // w&exp
	VPADDD  Y7, Y0, Y0           // w&exp + low
	VPOR    Y0, Y4, Y4
	VPAND   32(SI)(AX*4), Y6, Y1
	VPADDD  Y7, Y1, Y1
	VPOR    Y1, Y5, Y5
	ADDQ    $16, AX
	JMP     nfloop

nfdone:
	VPOR      Y5, Y4, Y4
	VMOVMSKPS Y4, CX // the sign bits
	TESTL     CX, CX
	SETNE     ret+16(FP)
	VZEROUPPER
	RET

// func layerNormGainAVX2(acc *float64, dy, x *float32, n int, mean, rstd float32)
//
// host's layerNormBackwardWKernel term on one row: acc[c] +=
// float64(dy[c] * ((x[c] - mean) * rstd)) for c in [0, n), n a multiple
// of 4.
TEXT ·layerNormGainAVX2(SB), NOSPLIT, $0-40
	MOVQ acc+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), BX
	VBROADCASTSS mean+32(FP), X4
	VBROADCASTSS rstd+36(FP), X5
	XORQ AX, AX

lngloop:
	CMPQ      AX, BX
	JGE       lngdone
	VMOVUPS   (SI)(AX*4), X0
	VSUBPS    X4, X0, X0          // x[c] - mean
	VMULPS    X5, X0, X0          // (x[c] - mean) * rstd
	VMULPS    (DX)(AX*4), X0, X0  // dy[c] * (...)
	VCVTPS2PD X0, Y0              // float64(...)
	VADDPD    (DI)(AX*8), Y0, Y0  // acc[c] + ...
	VMOVUPD   Y0, (DI)(AX*8)
	ADDQ      $4, AX
	JMP       lngloop

lngdone:
	VZEROUPPER
	RET

// func sumLanesAVX2(x *float32, n int, sums *[4]float64)
//
// host's sumLanes: sums[j%4] += float64(x[j]) for j in [0, n), n a
// multiple of 4.
TEXT ·sumLanesAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), BX
	MOVQ sums+16(FP), DX
	VMOVUPD (DX), Y1
	XORQ AX, AX

sumloop:
	CMPQ      AX, BX
	JGE       sumdone
	VCVTPS2PD (SI)(AX*4), Y0 // float64(x[j])
	VADDPD    Y0, Y1, Y1     // sums[j%4] += ...
	ADDQ      $4, AX
	JMP       sumloop

sumdone:
	VMOVUPD Y1, (DX)
	VZEROUPPER
	RET

// func squaredDevLanesAVX2(x *float32, n int, mean float64, sums *[4]float64)
//
// host's squaredDevLanes: d := float64(x[j]) - mean; sums[j%4] += d*d for
// j in [0, n), n a multiple of 4.
TEXT ·squaredDevLanesAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), BX
	VBROADCASTSD mean+16(FP), Y2
	MOVQ sums+24(FP), DX
	VMOVUPD (DX), Y1
	XORQ AX, AX

sqloop:
	CMPQ      AX, BX
	JGE       sqdone
	VCVTPS2PD (SI)(AX*4), Y0 // float64(x[j])
	VSUBPD    Y2, Y0, Y0     // d := ... - mean
	VMULPD    Y0, Y0, Y0     // d*d
	VADDPD    Y0, Y1, Y1     // sums[j%4] += d*d
	ADDQ      $4, AX
	JMP       sqloop

sqdone:
	VMOVUPD Y1, (DX)
	VZEROUPPER
	RET

// func layerNormBackwardSumsAVX2(dy, w, x *float32, n int, mean, rstd float32, sg, sgx *[4]float64)
//
// host's layerNormBackwardSums: g := dy[c]*w[c]; sg[c%4] += float64(g);
// sgx[c%4] += float64(g * (x[c] - mean) * rstd) for c in [0, n), n a
// multiple of 4.
TEXT ·layerNormBackwardSumsAVX2(SB), NOSPLIT, $0-56
	MOVQ dy+0(FP), DX
	MOVQ w+8(FP), CX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), BX
	VBROADCASTSS mean+32(FP), X4
	VBROADCASTSS rstd+36(FP), X5
	MOVQ sg+40(FP), DI
	MOVQ sgx+48(FP), R8
	VMOVUPD (DI), Y6
	VMOVUPD (R8), Y7
	XORQ AX, AX

lnbsloop:
	CMPQ      AX, BX
	JGE       lnbsdone
	VMOVUPS   (DX)(AX*4), X0
	VMULPS    (CX)(AX*4), X0, X0 // g := dy[c] * w[c]
	VCVTPS2PD X0, Y1             // float64(g)
	VADDPD    Y1, Y6, Y6         // sg[c%4] += ...
	VMOVUPS   (SI)(AX*4), X1
	VSUBPS    X4, X1, X1         // x[c] - mean
	VMULPS    X1, X0, X0         // g * (x[c] - mean)
	VMULPS    X5, X0, X0         // ... * rstd
	VCVTPS2PD X0, Y0
	VADDPD    Y0, Y7, Y7         // sgx[c%4] += ...
	ADDQ      $4, AX
	JMP       lnbsloop

lnbsdone:
	VMOVUPD Y6, (DI)
	VMOVUPD Y7, (R8)
	VZEROUPPER
	RET

// func layerNormBackwardRowAVX2(o, dy, w, x *float32, n int, mean, rstd, mg, mgx float32)
//
// host's layerNormBackwardXKernel output on one row: xhat := (x[c] -
// mean) * rstd; o[c] = rstd * (dy[c]*w[c] - mg - xhat*mgx) for c in [0, n),
// n a multiple of 8.
TEXT ·layerNormBackwardRowAVX2(SB), NOSPLIT, $0-56
	MOVQ o+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ w+16(FP), CX
	MOVQ x+24(FP), SI
	MOVQ n+32(FP), BX
	VBROADCASTSS mean+40(FP), Y4
	VBROADCASTSS rstd+44(FP), Y5
	VBROADCASTSS mg+48(FP), Y6
	VBROADCASTSS mgx+52(FP), Y7
	XORQ AX, AX

lnbrloop:
	CMPQ    AX, BX
	JGE     lnbrdone
	VMOVUPS (SI)(AX*4), Y0
	VSUBPS  Y4, Y0, Y0         // x[c] - mean
	VMULPS  Y5, Y0, Y0         // xhat := (...) * rstd
	VMOVUPS (DX)(AX*4), Y1
	VMULPS  (CX)(AX*4), Y1, Y1 // dy[c]*w[c]
	VSUBPS  Y6, Y1, Y1         // ... - mg
	VMULPS  Y7, Y0, Y0         // xhat*mgx
	VSUBPS  Y0, Y1, Y1         // dy[c]*w[c] - mg - xhat*mgx
	VMULPS  Y1, Y5, Y1         // rstd * (...)
	VMOVUPS Y1, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     lnbrloop

lnbrdone:
	VZEROUPPER
	RET

// func rowMaxAVX2(row *float32, n int, m *[8]float32)
//
// host's rowMax over row[0:n], n a multiple of 8, into its eight running
// maxima: if row[j] > m[j%8] { m[j%8] = row[j] } is VMAXPS with the row as
// the first source (the result is the second source unless the first is
// greater, NaN and equal zeros included).
TEXT ·rowMaxAVX2(SB), NOSPLIT, $0-24
	MOVQ row+0(FP), SI
	MOVQ n+8(FP), BX
	MOVQ m+16(FP), DX
	VMOVUPS (DX), Y1
	XORQ AX, AX

maxloop:
	CMPQ    AX, BX
	JGE     maxdone
	VMOVUPS (SI)(AX*4), Y0
	VMAXPS  Y1, Y0, Y1 // row[j] > m ? row[j] : m
	ADDQ    $8, AX
	JMP     maxloop

maxdone:
	VMOVUPS Y1, (DX)
	VZEROUPPER
	RET

// func bf16ToF32AVX2(dst *float32, src *uint16, n int)
//
// cuda.BF16ToF32 on src[0:n], n a multiple of 8: the bits shifted into the
// high half of a float32.
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), BX
	XORQ AX, AX

bfdloop:
	CMPQ      AX, BX
	JGE       bfddone
	VPMOVZXWD (SI)(AX*2), Y0 // uint32(h)
	VPSLLD    $16, Y0, Y0    // << 16
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	JMP       bfdloop

bfddone:
	VZEROUPPER
	RET

// func f32ToBF16AVX2(dst *uint16, src *float32, n int)
//
// cuda.F32ToBF16 on src[0:n], n a multiple of 8: a NaN (b&0x7fffffff >
// 0x7f800000) keeps its top 16 bits, with 0x40 set when their mantissa
// bits are all zero; any other value is (b + 0x7fff + (b>>16)&1) >> 16,
// round to nearest even.
TEXT ·f32ToBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), BX
	MOVL $0x7fffffff, CX
	MOVQ CX, X8
	VPBROADCASTD X8, Y8 // 0x7fffffff
	MOVL $0x7f800000, CX
	MOVQ CX, X9
	VPBROADCASTD X9, Y9 // 0x7f800000
	MOVL $0x7fff, CX
	MOVQ CX, X10
	VPBROADCASTD X10, Y10 // 0x7fff
	MOVL $1, CX
	MOVQ CX, X11
	VPBROADCASTD X11, Y11 // 1
	MOVL $0x7f, CX
	MOVQ CX, X12
	VPBROADCASTD X12, Y12 // 0x7f
	MOVL $0x40, CX
	MOVQ CX, X13
	VPBROADCASTD X13, Y13 // 0x40
	VPXOR Y14, Y14, Y14   // 0
	XORQ AX, AX

bfeloop:
	CMPQ     AX, BX
	JGE      bfedone
	VMOVDQU  (SI)(AX*4), Y0 // b
	VPSRLD   $16, Y0, Y1    // b>>16 (a NaN's p)
	VPAND    Y11, Y1, Y2    // (b>>16)&1
	VPADDD   Y10, Y0, Y3    // b + 0x7fff
	VPADDD   Y2, Y3, Y3     // ... + (b>>16)&1
	VPSRLD   $16, Y3, Y3    // (...) >> 16: the rounded value
	VPAND    Y12, Y1, Y4    // p&0x7f
	VPCMPEQD Y14, Y4, Y4    // p&0x7f == 0
	VPAND    Y13, Y4, Y4    // 0x40 there
	VPOR     Y4, Y1, Y1     // p |= 0x40
	VPAND    Y8, Y0, Y5     // b&0x7fffffff
	VPCMPGTD Y9, Y5, Y5     // ... > 0x7f800000: NaN
	VPBLENDVB Y5, Y1, Y3, Y3 // NaN ? p : rounded
	VEXTRACTI128 $1, Y3, X4
	VPACKUSDW X4, X3, X3    // the eight low halves, in order
	VMOVDQU  X3, (DI)(AX*2)
	ADDQ     $8, AX
	JMP      bfeloop

bfedone:
	VZEROUPPER
	RET
