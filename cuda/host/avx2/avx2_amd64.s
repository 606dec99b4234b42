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
