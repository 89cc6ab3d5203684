"""Every hstu-ops op family, per kernel and dtype, against its PyTorch reference on one device.

    python tools/gpu/correctness.py --json OUT.json [--tiny] [--device cuda|cpu]

The cases, the tolerances and the error measure are hstu_ops.selfcheck's (its docstring says
what is compared): for each family (jagged 1-D and 2-D, attention forward and backward with
ragged lengths, targets and contextual tokens, the fused uvqk and output blocks, the norms, the
position and time embeddings, addmm) and each of its non-reference kernels (TRITON, NATIVE),
outputs and gradients in float32 and bfloat16; a family's error is its worst over ops, outputs
and gradients, and it passes under the tolerances. The JSON is rewritten before every case, so
a stop keeps the cases done.

On the CPU the TRITON kernels run in Triton's interpreter (TRITON_INTERPRET=1, set here when
no GPU is visible) and the NATIVE kernels are the C++ ones. A kernel that cannot run on the
device is listed with the reason, never counted as a pass. Exit status 1 when a kernel fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True, help="write the result here")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (the CPU smoke)")
    parser.add_argument("--device", help="cuda or cpu (default: cuda when visible)")
    args = parser.parse_args(argv)
    import torch

    from hstu_ops import selfcheck

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cpu" and "TRITON_INTERPRET" not in os.environ:
        # hstu_ops.triton is imported on first use, after this.
        os.environ["TRITON_INTERPRET"] = "1"
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference in true float32

    def write(result: dict) -> None:  # aside, then renamed: a stop keeps the cases done
        part = args.json.with_name(f".{args.json.name}.part")
        part.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(part, args.json)

    shapes = selfcheck.TINY if args.tiny else selfcheck.FULL
    result = selfcheck.check(device, shapes, log=lambda s: print(s, flush=True), progress=write)
    write(result)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
