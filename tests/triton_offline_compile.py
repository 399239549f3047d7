"""Compile notebook 08's and 09's kernels for NVIDIA GPUs without a GPU, and print what each one needs.

Run as a script with TRITON_INTERPRET=0 (tests/test_triton_compile.py does that; unset, importing
the package would turn the interpreter on, as there is no GPU). Triton lowers a kernel to PTX and
assembles it with the ptxas its wheel ships, so a kernel that would not compile on Colab's T4
(sm_75), an A100 (sm_80) or an H100 (sm_90), or that needs more shared memory than a program may
have there, fails here too. Compiled: the package's kernels
at the block sizes `launchers.forward_config` (forward) and `launchers.backward_config` (backward)
pick, and the solution notebooks' own kernels at the block sizes their wrappers pick on a GPU. Prints
one JSON object per compiled kernel.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = {
    "notebook": ROOT / "solutions" / "08_triton_flash_attention.ipynb",
    "notebook 09": ROOT / "solutions" / "09_backward.ipynb",
}
"""Where the `source` of a job that is not the package's finds its kernels."""
BACKWARD_KERNELS = ("flash_attention_backward_dkdv_kernel", "flash_attention_backward_dq_kernel")
ARCHITECTURES = {75: (7, 5), 80: (8, 0), 90: (9, 0)}


def solution_kernels(source: str) -> object:
    """The @triton.jit cells of a solution notebook, markers dropped, imported as a module."""
    import nbformat

    notebook = nbformat.read(SOLUTIONS[source], as_version=4)
    parts = ["import math", "import torch", "import triton", "import triton.language as tl"]
    for cell in notebook.cells:
        if cell.cell_type == "code" and "@triton.jit" in cell.source and "### BEGIN SOLUTION" in cell.source:
            parts.append("\n".join(line for line in cell.source.split("\n") if "### " not in line))
    path = Path(tempfile.mkdtemp()) / f"{SOLUTIONS[source].stem}_solution.py"
    path.write_text("\n\n".join(parts))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_one(job: dict) -> dict:
    """Compile one kernel for one architecture; report its shared memory."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if job["source"] == "package":
        from attn_course.triton_flash import kernels as module
    else:
        module = solution_kernels(job["source"])
    kernel = getattr(module, job["kernel"])
    constexprs = job["constexprs"]
    signature = {}
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in ("lse_ptr", "delta_ptr", "scores_ptr"):
            signature[name] = "*fp32"
        elif name.endswith("_ptr"):
            signature[name] = "*" + job["dtype"]
        else:
            signature[name] = "fp32" if name == "sm_scale" else "i32"
    # What a launch with torch tensors and lengths that are multiples of 16 specializes on: aligned
    # pointers and strides. Without it Triton cannot pipeline the loads, and needs less shared memory.
    aligned = [
        name
        for name in kernel.arg_names
        if name.endswith("_ptr") or name.startswith("stride") or name in ("t_q", "t_k")
    ]
    source = ASTSource(
        fn=kernel,
        signature=signature,
        constexprs={(kernel.arg_names.index(name),): value for name, value in constexprs.items()},
        attrs={(kernel.arg_names.index(name),): [["tt.divisibility", 16]] for name in aligned},
    )
    options = {"num_warps": job["num_warps"], "num_stages": job["num_stages"]}
    compiled = triton.compile(source, target=GPUTarget("cuda", job["arch"], 32), options=options)
    pipelined = compiled.asm["ttgir"].count("async_copy_global_to_local")  # loads issued ahead of use
    cubin = len(compiled.asm["cubin"])
    ptx = compiled.asm["ptx"]
    tensor_core_ops = ptx.count("mma.sync.aligned") + ptx.count("wgmma.mma_async")  # tl.dot on tensor cores
    return {**job, "shared": compiled.metadata.shared, "cubin_bytes": cubin, "async_copies": pipelined,
            "tensor_core_ops": tensor_core_ops, "fma_ops": ptx.count("fma.rn.f32")}  # fmt: skip


def jobs() -> list[dict]:
    """Every kernel and configuration to compile."""
    from attn_course.triton_flash.launchers import backward_config, forward_config

    found = []
    for arch, capability in ARCHITECTURES.items():
        for head_dim in (64, 128):
            config = forward_config(head_dim, "cuda", capability=capability)
            blocks = {"HEAD_DIM": head_dim, "BLOCK_D": head_dim, "IS_CAUSAL": True}
            found.append(
                dict(
                    source="package",
                    kernel="flash_attention_kernel",
                    arch=arch,
                    dtype="fp16",
                    constexprs={**blocks, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n},
                    num_warps=config.num_warps,
                    num_stages=config.num_stages,
                )  # fmt: skip
            )
        for head_dim in (64, 128) if arch in (75, 90) else ():  # the notebook's wrapper: 64×32 on a GPU
            blocks = {"HEAD_DIM": head_dim, "BLOCK_D": head_dim, "IS_CAUSAL": True}
            blocks.update(BLOCK_M=64, BLOCK_N=32)
            found.append(
                dict(
                    source="notebook",
                    kernel="flash_attention_kernel",
                    arch=arch,
                    dtype="fp16",
                    constexprs=blocks,
                    num_warps=4,
                    num_stages=2,
                )  # fmt: skip
            )
    for arch, capability in ARCHITECTURES.items():  # notebook 09: the backward kernels
        for head_dim in (64, 128):
            config = backward_config(head_dim, "cuda", capability=capability)
            blocks = {"HEAD_DIM": head_dim, "BLOCK_D": head_dim, "IS_CAUSAL": True}
            for kernel in BACKWARD_KERNELS:
                found.append(
                    dict(
                        source="package",
                        kernel=kernel,
                        arch=arch,
                        dtype="fp16",
                        constexprs={**blocks, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n},
                        num_warps=config.num_warps,
                        num_stages=config.num_stages,
                    )  # fmt: skip
                )
                found.append(  # the notebook's wrapper: 32×32 on a GPU
                    dict(source="notebook 09", kernel=kernel, arch=arch, dtype="fp16",
                         constexprs={**blocks, "BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=2)
                )  # fmt: skip
    for source in ("package", "notebook"):
        for arch in (75, 90):  # one tile of scores per program: 32×32 in the package and the notebook
            found.append(
                dict(source=source, kernel="scores_kernel", arch=arch, dtype="fp16",
                     constexprs={"HEAD_DIM": 128, "BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=2)
            )  # fmt: skip
        for kernel, block in (("add_kernel", 1024), ("softmax_kernel", 64)):
            found.append(
                dict(
                    source=source,
                    kernel=kernel,
                    arch=75,
                    dtype="fp32",
                    constexprs={"BLOCK": block},
                    num_warps=4,
                    num_stages=2,
                )  # fmt: skip
            )
    return found


def main() -> int:
    """Compile every job on two processes; print one JSON line each; exit 1 if one fails."""
    failed = 0
    with ProcessPoolExecutor(max_workers=2) as pool:
        todo = jobs()
        for result in pool.map(_safe_compile, todo):
            failed += "error" in result
            print(json.dumps(result), flush=True)
    return 1 if failed else 0


def _safe_compile(job: dict) -> dict:
    try:
        return compile_one(job)
    except Exception as error:  # reported, so that every failing kernel shows at once
        return {**job, "error": f"{type(error).__name__}: {error}"[:2000]}


if __name__ == "__main__":
    sys.exit(main())
