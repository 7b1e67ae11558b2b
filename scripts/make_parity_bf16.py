#!/usr/bin/env python3
"""Writes the bfloat16 parity cases: the standard and variant sets of the shared generator, each
case also run in float32 under PyTorch's CPU autocast to bfloat16 (torch.autocast("cpu",
dtype=torch.bfloat16)), whose outputs and gradients are stored beside the float64 reference as
autocast.out.NAME, autocast.grad.in.NAME and autocast.grad.param.NAME; and the training
trajectories of tests/parity/training, trained again in float32 under autocast from the same start
on the same batches (autocast.out.loss, autocast.out.grad_norm, autocast.final.param.NAME).

`gradflow parity DIR --dtype bf16` runs each case with its products in bfloat16 and compares every
tensor with the float64 reference: its error must stay within twice the error PyTorch's autocast
makes on the same case, plus 2^-8 (bfloat16's unit roundoff) of the tensor's norm, so a bf16 run is
held to the standard PyTorch users get (docs/precision.md).

Uses make_cases() from the shared generator (../shared/parity/make_parity.py by default); the
float64 part of every case is that of tests/parity/standard and tests/parity/variant (same seeds,
same draws) up to float64 rounding (PyTorch's float64 products follow its thread count; 1.7e-15
relative when written). Needs Debian's python3-torch (1.13: CPU autocast to bfloat16 on oneDNN):
  /usr/bin/python3 scripts/make_parity_bf16.py tests/parity/bf16
"""
import copy, json, math, os, struct, sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import parity_generator  # scripts/parity_generator.py (the script's folder is on sys.path)

here = os.path.dirname(os.path.abspath(__file__))
make_parity = parity_generator.load()
f32, save_safetensors = make_parity.f32, make_parity.save_safetensors

VARIANT = dict(B=2, L=6, S=3, D=24, H=3, out=5, vocab=17, ff=40, layers=3, activation="gelu",
               src_lengths=[3, 1], tgt_lengths=[6, 2])  # as scripts/make_parity_variant.py


def float32_copy(module):
    m = copy.deepcopy(module).float()
    if hasattr(m, "pe"):  # the translator's positional table is a plain attribute, not a buffer
        m.pe = m.pe.float()
    return m


def run_case(name, kind, config, module, inputs, forward, out_dir, g, prefix=""):
    """make_parity.run_case (the same draws from g, so the float64 case is unchanged), plus the same
    forward and backward in float32 under autocast to bfloat16, with the same upstream gradients."""
    for t in inputs.values():
        if t.dtype == torch.float64:
            t.requires_grad_(True)
    params = dict(module.named_parameters()) if module is not None else {}
    outs = forward(module, inputs)
    total, gradouts = 0.0, {}
    for k, o in outs.items():
        if o.dim() == 0:
            total = total + o
        else:
            go = f32(*o.shape, g=g)
            gradouts[k] = go
            total = total + (torch.nan_to_num(o, nan=0.0) * go).sum()
    leaves = [t for t in inputs.values() if t.requires_grad] + list(params.values())
    grads = torch.autograd.grad(total, leaves, allow_unused=True)
    tensors = {}
    for k, t in inputs.items():
        tensors["in." + k] = t
    for k, p in params.items():
        tensors["param." + k] = p
    for k, o in outs.items():
        tensors["out." + k] = o
    for k, go in gradouts.items():
        tensors["gradout." + k] = go
    names = ["in." + k for k, t in inputs.items() if t.requires_grad] + ["param." + k for k in params]
    for n, gr in zip(names, grads):
        tensors["grad." + n] = gr if gr is not None else torch.zeros_like(tensors[n])

    # The same under autocast: float32 module and inputs, products in bfloat16.
    m32 = float32_copy(module) if module is not None else None
    ins32 = {k: (t.detach().float().requires_grad_(True) if t.dtype == torch.float64 else t) for k, t in inputs.items()}
    params32 = dict(m32.named_parameters()) if m32 is not None else {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outs32 = forward(m32, ins32)
        total32 = 0.0
        for k, o in outs32.items():
            o = o.float()
            total32 = total32 + (o if o.dim() == 0 else (torch.nan_to_num(o, nan=0.0) * gradouts[k].float()).sum())
    leaves32 = [t for t in ins32.values() if t.requires_grad] + list(params32.values())
    grads32 = torch.autograd.grad(total32, leaves32, allow_unused=True)
    for k, o in outs32.items():
        tensors["autocast.out." + k] = o.detach().double()
    for n, gr in zip(names, grads32):
        tensors["autocast.grad." + n] = gr.double() if gr is not None else torch.zeros_like(tensors[n])

    meta = {"case": make_parity.json.dumps({"kind": kind, "config": config}, sort_keys=True)}
    save_safetensors(os.path.join(out_dir, prefix + name + ".safetensors"), tensors, meta)


def load_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    dtypes = {"F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool}
    tensors = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        buf = bytearray(raw[8 + n + s:8 + n + e])
        tensors[k] = torch.frombuffer(buf, dtype=dtypes[v["dtype"]]).reshape(v["shape"]).clone() if buf else \
            torch.zeros(v["shape"], dtype=dtypes[v["dtype"]])
    return header["__metadata__"], tensors


def autocast_trajectory(src_path, out_path):
    """The seq2seq_train case at src_path trained again in float32 under autocast, as
    make_training_parity.py trains it in float64 (same start, batches, schedule and clipping)."""
    meta, t = load_safetensors(src_path)
    c = json.loads(meta["case"])["config"]
    m = make_parity.Seq2Seq(c["src_vocab"], c["tgt_vocab"], c["d_model"], c["nhead"], c["num_layers"], c["dim_feedforward"],
                            c["norm_first"])
    m.load_state_dict({k[6:]: v for k, v in t.items() if k.startswith("param.")}, strict=False)
    m = float32_copy(m)
    opt = torch.optim.Adam(m.parameters(), lr=c["lr"], betas=tuple(c["betas"]), eps=c["eps"])
    warm = c["warmup"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, math.sqrt(warm / (s + 1))))
    losses, norms = [], []
    for k in range(c["steps"]):
        src, tgt = t[f"in.src.{k}"], t[f"in.tgt.{k}"]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = m(src, tgt[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=0,
                                   label_smoothing=c["label_smoothing"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norms.append(float(nn.utils.clip_grad_norm_(m.parameters(), c["clip"])))
        opt.step()
        sched.step()
        losses.append(float(loss))
    t["autocast.out.loss"] = torch.tensor(losses)
    t["autocast.out.grad_norm"] = torch.tensor(norms)
    for k, p in m.named_parameters():
        t["autocast.final.param." + k] = p.detach().double()
    save_safetensors(out_path, t, meta)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/parity/bf16"
    os.makedirs(out, exist_ok=True)
    make_parity.run_case = lambda *a: run_case(*a, prefix="standard_")
    make_parity.make_cases(out, 1234, make_parity.STANDARD)
    make_parity.run_case = lambda *a: run_case(*a, prefix="variant_")
    make_parity.make_cases(out, 4321, VARIANT)
    training = os.path.join(here, "..", "tests", "parity", "training")
    for name in sorted(os.listdir(training)):
        autocast_trajectory(os.path.join(training, name), os.path.join(out, "training_" + name))
