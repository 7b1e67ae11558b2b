#!/usr/bin/env python3
"""Checks that gradflow checkpoints and PyTorch state_dicts cross over, on a trained run folder.

1. Loads RUN/best.safetensors (read with the plain format: 8-byte length, JSON header, raw data)
   into the PyTorch reference translator (../shared/reference/torch_translator.py) with
   load_state_dict(strict=True), greedy-decodes sentences with it, and compares with
   `gradflow translate` on the same weights.
2. Saves the PyTorch model's state_dict as safetensors in a copy of the run folder and has
   gradflow translate with it: the same translations again.

  /usr/bin/python3 scripts/torch_crossover.py RUN_DIR SENTENCES_FILE [--reference PATH] [--gradflow build/gradflow]
Needs Debian's python3-torch.
"""
import argparse, importlib.util, json, os, shutil, struct, subprocess, sys, tempfile

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(raw[base + b:base + end]), dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        data = t.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("sentences")
    ap.add_argument("--reference", default=os.path.join(here, "..", "..", "shared", "reference", "torch_translator.py"))
    ap.add_argument("--gradflow", default=os.path.join(here, "..", "build", "gradflow"))
    a = ap.parse_args()

    spec = importlib.util.spec_from_file_location("torch_translator", a.reference)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)

    cfg = json.load(open(os.path.join(a.run, "config.json")))
    src_vocab = open(os.path.join(a.run, "vocab.src.txt"), encoding="utf-8").read().split("\n")[:-1]
    tgt_vocab = open(os.path.join(a.run, "vocab.tgt.txt"), encoding="utf-8").read().split("\n")[:-1]
    model = ref.Seq2Seq(len(src_vocab), len(tgt_vocab), cfg["d_model"], cfg["heads"], cfg["layers"], cfg["ff"], 0.0)
    state = read_safetensors(os.path.join(a.run, "best.safetensors"))
    model.load_state_dict(state, strict=True)
    model.eval()
    print(f"loaded {len(state)} tensors into PyTorch with strict=True")

    index = {w: i for i, w in enumerate(src_vocab)}
    sents = [l.split() for l in open(a.sentences, encoding="utf-8").read().split("\n") if l.strip()]
    torch_out = []
    for s in sents:
        ids = torch.tensor([[index.get(w, 1) for w in s]])
        row = model.greedy(ids, ids.size(1) + 50)[0].tolist()
        words = []
        for t in row:
            if t in (3, 0):
                break
            words.append(tgt_vocab[t])
        torch_out.append(" ".join(words))

    def gradflow(model_path):
        text = "\n".join(" ".join(s) for s in sents) + "\n"
        r = subprocess.run([a.gradflow, "translate", "--model", model_path], input=text, capture_output=True, text=True, check=True)
        return r.stdout.split("\n")[:-1]

    ours = gradflow(a.run)
    same = sum(x == y for x, y in zip(ours, torch_out))
    print(f"gradflow weights: PyTorch and gradflow agree on {same}/{len(sents)} greedy translations")

    with tempfile.TemporaryDirectory() as tmp:
        for f in ("config.json", "vocab.src.txt", "vocab.tgt.txt"):
            shutil.copy(os.path.join(a.run, f), tmp)
        write_safetensors(os.path.join(tmp, "best.safetensors"), model.state_dict())
        back = gradflow(tmp)
    same_back = sum(x == y for x, y in zip(back, torch_out))
    print(f"PyTorch-saved state_dict: gradflow agrees with PyTorch on {same_back}/{len(sents)}")
    for s, x, y in list(zip(sents, ours, torch_out))[:3]:
        print(f"  {' '.join(s)}\n    gradflow: {x}\n    pytorch:  {y}")
    sys.exit(0 if same == len(sents) and same_back == len(sents) else 1)


if __name__ == "__main__":
    main()
