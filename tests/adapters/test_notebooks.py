"""Every notebook in notebooks/ runs top to bottom (offline, on the scripted models)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
for _needed in ("ipykernel", "matplotlib", "langchain.agents", "llama_index.core"):
    pytest.importorskip(_needed)

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # no key: the agents run on the scripted models, and their cells check the full loop
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("CLAWMEM_NOTEBOOK_EMBEDDER", raising=False)
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    if path.stem.startswith("01"):
        assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2
    if path.stem.startswith("04"):  # the plot of what each candidate's score is made of
        assert sum("image/png" in o.get("data", {}) for o in outputs) >= 1
