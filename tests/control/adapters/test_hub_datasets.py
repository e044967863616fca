"""Dataset repositories: the Hub double serves them, ``resolve_dataset`` pins and checks them.

Everything goes over HTTP to the double through the real ``huggingface_hub`` client
(``HfApi.dataset_info``, ``auth_check``, ``hf_hub_download(repo_type="dataset")``, ``HfFileSystem``).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.control.adapters.hub_client import check_access, resolve_revision
from rlpipe.control.adapters.hub_datasets import (
    EVAL_FIELDS,
    DataFile,
    PinnedDataset,
    _glob,
    resolve_dataset,
)
from rlpipe.core.failures import PermanentFailure, TransientFailure
from rlpipe.local.hub_double import (
    DATASET,
    GATED_DATASET,
    HubDouble,
    HubFile,
    dataset_files,
    gsm8k_files,
    parquet_bytes,
)
from rlpipe.local.hub_double.data import GITATTRIBUTES
from rlpipe.local.hub_double.datasets import gsm8k_row

TOKEN = "datasets-token"
GRANTED = "granted-token"
GSM8K = "openai/gsm8k"
OPENR1 = "open-r1/OpenR1-Math-220k"
SPLITS = {"dataset.train_split": "train", "dataset.eval_split": "test"}


def _card(meta: dict[str, Any]) -> HubFile:
    return HubFile.of("README.md", f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n\n# card\n")


def _parquet(name: str, rows: int = 3) -> HubFile:
    raw = parquet_bytes(
        {"question": [f"q{i}" for i in range(rows)], "answer": [f"#### {i}" for i in range(rows)]}
    )
    return HubFile(name, len(raw), hashlib.sha256(raw).hexdigest(), raw)


def _repo(*files: HubFile) -> dict[str, HubFile]:
    return {".gitattributes": HubFile.of(".gitattributes", GITATTRIBUTES)} | {f.name: f for f in files}


@pytest.fixture(scope="module")
def hub() -> Iterator[HubDouble]:
    server = HubDouble().start()
    server.add_known_datasets()
    server.grant(GATED_DATASET, GRANTED, repo_type=DATASET)
    server.add_repo("org/model")  # a model repo, for the model look-up's messages
    server.add_repo("org/gated-model", gated=True)
    server.add_dataset("org/short", gsm8k_files({"train": 3, "test": 2}, configs=("main",)))
    server.add_dataset(
        "org/jsonl",
        _repo(
            HubFile.of("data/train.jsonl", '{"question": "q", "answer": "#### 1"}\n'),
            _parquet("data/test.parquet"),
            _card({"configs": [{"config_name": "default", "data_files": [
                {"split": "train", "path": "data/train.jsonl"},
                {"split": "test", "path": "data/test.parquet"},
            ]}]}),
        ),
    )  # fmt: skip
    server.add_dataset(
        "org/dirs",
        _repo(
            _parquet("data/train/a.parquet"),
            _parquet("data/train/b.parquet"),
            _parquet("data/test/c.parquet"),
        ),
    )
    server.add_dataset(
        "org/names",
        _repo(_parquet("my-train.parquet"), _parquet("eval_set.parquet"), _parquet("notes.parquet")),
    )
    server.add_dataset(
        "org/flat",
        _repo(_parquet("data.parquet"), _parquet("more/extra.parquet"), HubFile.of("notes.txt", "x")),
    )
    server.add_dataset(
        "org/globs",
        _repo(
            _parquet("data/a.parquet"),
            _parquet("data/deep/b.parquet"),
            _parquet("data/.hidden.parquet"),
            _parquet("holdout/c.parquet"),
            HubFile.of("data/notes.md", "not data"),
            _card({"configs": [
                {"config_name": "shallow", "data_files": "data/*"},
                {"config_name": "deep", "data_files": [{"split": "train", "path": "data/**"}, {"split": "test", "path": ["holdout/*.parquet"]}]},
                {"config_name": "broken", "data_files": [{"split": "train", "path": "data/missing.parquet"}]},
                {"config_name": "empty", "data_files": [{"split": "train", "path": "nowhere/*.parquet"}]},
                {"config_name": "dir", "data_dir": "holdout", "default": True},
            ]}),
        ),
    )  # fmt: skip
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def client(hub: HubDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    for name, value in hub.client_constants().items():
        monkeypatch.setattr(huggingface_hub.constants, name, value)


def _head(hub: HubDouble, repo: str) -> str:
    return hub.repos[f"datasets/{repo}"].branches["main"]


def _listed(hub: HubDouble, repo: str, path: str, revision: str = "main") -> DataFile:
    raw = hub.file_bytes(repo, path, revision, repo_type=DATASET)
    return DataFile(path, len(raw), hashlib.sha256(raw).hexdigest())


def _pin(repo: str, revision: str = "main", **kwargs: Any) -> PinnedDataset:
    kwargs.setdefault("splits", SPLITS)
    kwargs.setdefault("subset", None)
    kwargs.setdefault("token", TOKEN)
    return resolve_dataset(repo, revision, timeout=5, **kwargs)


# ---- the double, through the real client --------------------------------------------------------


def test_the_doubles_dataset_info_parses_in_the_real_client(hub: HubDouble) -> None:
    from huggingface_hub import HfApi

    info = HfApi(token=TOKEN).dataset_info(GSM8K, revision="main", files_metadata=True, timeout=5)
    assert (
        info.id == GSM8K and info.sha == _head(hub, GSM8K) and info.gated is False and info.private is False
    )
    siblings = {s.rfilename: s for s in info.siblings or []}
    train = siblings["main/train-00000-of-00001.parquet"]
    listed = _listed(hub, GSM8K, train.rfilename)
    assert (train.size, train.lfs and train.lfs.sha256) == (listed.size, listed.sha256)
    assert siblings["README.md"].lfs is None and siblings["README.md"].size
    card = info.card_data
    assert card is not None
    assert [c["config_name"] for c in card.configs] == ["main", "socratic"]
    assert card.configs[0]["data_files"] == [
        {"split": "train", "path": "main/train-*"},
        {"split": "test", "path": "main/test-*"},
    ]
    assert card.dataset_info[0]["splits"][0] == {
        "name": "train",
        "num_bytes": card.dataset_info[0]["splits"][0]["num_bytes"],
        "num_examples": 64,
    }
    assert "format:parquet" in (info.tags or [])
    # what the client called (hf_api.py:3273-3277): /api/datasets/{repo}/revision/{rev}
    assert hub.paths(f"/api/datasets/{GSM8K}/revision/main")
    # without files_metadata the siblings carry no sizes, as on the Hub
    bare = HfApi(token=TOKEN).dataset_info(GSM8K, timeout=5)
    assert bare.siblings and all(s.size is None for s in bare.siblings)


def test_datasets_and_models_are_apart(hub: HubDouble) -> None:
    from huggingface_hub import HfApi, errors

    api = HfApi(token=TOKEN)
    with pytest.raises(errors.RepositoryNotFoundError):
        api.model_info(GSM8K)
    with pytest.raises(errors.RepositoryNotFoundError):
        api.dataset_info("org/model")
    assert api.list_repo_files(GSM8K, repo_type="dataset")[0] == ".gitattributes"
    assert [c.commit_id for c in api.list_repo_commits(GSM8K, repo_type="dataset")] == [_head(hub, GSM8K)]


def test_a_gated_dataset_shows_its_metadata_and_guards_its_files(hub: HubDouble, tmp_path: Path) -> None:
    from huggingface_hub import HfApi, errors, hf_hub_download

    assert HfApi(token=False).dataset_info(GATED_DATASET).gated == "manual"
    with pytest.raises(errors.GatedRepoError) as refused:
        HfApi(token=TOKEN).auth_check(GATED_DATASET, repo_type="dataset")
    assert refused.value.response.status_code == 403
    with pytest.raises(errors.GatedRepoError) as anonymous:
        hf_hub_download(GATED_DATASET, "README.md", repo_type="dataset", cache_dir=tmp_path, token=False)
    assert anonymous.value.response.status_code == 401
    HfApi(token=GRANTED).auth_check(GATED_DATASET, repo_type="dataset")
    path = hf_hub_download(GATED_DATASET, "README.md", repo_type="dataset", cache_dir=tmp_path, token=GRANTED)
    assert Path(path).read_bytes() == hub.file_bytes(GATED_DATASET, "README.md", repo_type=DATASET)


def test_hf_file_system_lists_and_reads_ranges_of_a_dataset(hub: HubDouble) -> None:
    from huggingface_hub import HfFileSystem

    sha = _head(hub, GSM8K)
    fs = HfFileSystem(token=TOKEN, endpoint=hub.url)
    assert fs.ls(f"datasets/{GSM8K}@{sha}/main", detail=False) == [
        f"datasets/{GSM8K}@{sha}/main/test-00000-of-00001.parquet",
        f"datasets/{GSM8K}@{sha}/main/train-00000-of-00001.parquet",
    ]
    whole = hub.file_bytes(GSM8K, "main/test-00000-of-00001.parquet", repo_type=DATASET)
    with fs.open(f"datasets/{GSM8K}@{sha}/main/test-00000-of-00001.parquet", "rb", block_size=512) as f:
        f.seek(100)
        assert f.read(2000) == whole[100:2100]
        f.seek(len(whole) - 8)
        assert f.read() == whole[-8:]  # the parquet footer length and magic


def test_the_seeded_parquet_is_real_parquet(hub: HubDouble) -> None:
    pq = pytest.importorskip("pyarrow.parquet")  # not a dependency: checked where it is installed
    raw = hub.file_bytes("org/short", "main/train-00000-of-00001.parquet", repo_type=DATASET)
    table = pq.read_table(io.BytesIO(raw))
    assert table.num_rows == 3 and table.column_names == ["question", "answer"]
    assert table.to_pylist()[0] == gsm8k_row("train", 0)


def test_parquet_files_are_framed_as_parquet() -> None:
    raw = parquet_bytes({"a": ["x", "yz"], "n": [1, 2], "b": [True, False]})
    footer = int.from_bytes(raw[-8:-4], "little")
    assert raw[:4] == raw[-4:] == b"PAR1" and 0 < footer < len(raw) - 12
    assert b"rlpipe hub double" in raw[-8 - footer : -8]
    with pytest.raises(ValueError, match="same number of rows"):
        parquet_bytes({"a": ["x"], "b": []})


def test_gsm8k_rows_look_like_gsm8k() -> None:
    row = gsm8k_row("train", 2, socratic=True)
    lines = row["answer"].splitlines()
    assert lines[-1].startswith("#### ") and int(lines[-1][5:]) >= 0
    assert all(" ** " in line and "<<" in line for line in lines[:-1])
    plain = gsm8k_row("train", 2)
    assert plain["question"] == row["question"] and " ** " not in plain["answer"]
    assert gsm8k_row("test", 2) != plain


# ---- resolve_dataset ----------------------------------------------------------------------------


def test_a_branch_resolves_to_its_sha_with_each_splits_files(hub: HubDouble) -> None:
    pinned = _pin(GSM8K, subset="main")
    assert pinned.sha == _head(hub, GSM8K) and pinned.revision == "main" and pinned.subset == "main"
    assert pinned.files == {
        "train": (_listed(hub, GSM8K, "main/train-00000-of-00001.parquet"),),
        "test": (_listed(hub, GSM8K, "main/test-00000-of-00001.parquet"),),
    }
    assert pinned.num_examples == {"train": 64, "test": 24}
    assert pinned.features == {"question": "string", "answer": "string"}
    assert pinned.gated is False
    assert hub.paths(f"/api/datasets/{GSM8K}/auth-check")  # the access check, as for models
    socratic = _pin(GSM8K, subset="socratic", splits={"dataset.train_split": "train"})
    assert [f.path for f in socratic.files["train"]] == ["socratic/train-00000-of-00001.parquet"]


def test_a_sha_is_kept(hub: HubDouble) -> None:
    sha = _head(hub, GSM8K)
    pinned = _pin(GSM8K, sha, subset="main")
    assert (pinned.revision, pinned.sha) == (sha, sha)


def test_a_branch_that_moves_after_pinning_keeps_the_old_files_at_the_old_sha(
    hub: HubDouble, tmp_path: Path
) -> None:
    from huggingface_hub import hf_hub_download

    hub.add_dataset("org/moving", gsm8k_files({"train": 5, "test": 2}, configs=("main",)))
    before = _pin("org/moving", subset="main")
    new = gsm8k_files({"train": 9, "test": 2}, configs=("main",))
    moved = hub.push("org/moving", {k: v for k, v in new.items() if k != ".gitattributes"}, repo_type=DATASET)
    after = _pin("org/moving", subset="main")
    assert after.sha == moved != before.sha
    assert after.files["train"] != before.files["train"] and after.num_examples["train"] == 9
    again = _pin("org/moving", before.sha, subset="main")
    assert again.files == before.files and again.num_examples["train"] == 5
    (old,) = before.files["train"]
    path = hf_hub_download(
        "org/moving", old.path, repo_type="dataset", revision=before.sha, cache_dir=tmp_path, token=TOKEN
    )
    data = Path(path).read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (old.size, old.sha256)


def test_hf_hub_download_at_the_sha_returns_the_listed_bytes(hub: HubDouble, tmp_path: Path) -> None:
    from huggingface_hub import hf_hub_download

    pinned = _pin(OPENR1, splits={"dataset.train_split": "train"})
    assert pinned.subset == "default" and len(pinned.files["train"]) == 2  # two shards
    for item in pinned.files["train"]:
        path = hf_hub_download(
            OPENR1, item.path, repo_type="dataset", revision=pinned.sha, cache_dir=tmp_path, token=TOKEN
        )
        data = Path(path).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (item.size, item.sha256)
        # the URL shape hf_hub_url builds for a dataset (file_download.py:284-291)
        assert hub.paths(f"/datasets/{OPENR1}/resolve/{pinned.sha}/{item.path}")
    assert pinned.num_examples == {"train": 48}
    assert pinned.features and pinned.features["correctness_count"] == "int64"
    assert list(pinned.features)[:3] == ["problem", "solution", "answer"]


def test_a_split_shorter_than_a_run_needs_shows_in_num_examples() -> None:
    assert _pin("org/short", subset="main").num_examples == {"train": 3, "test": 2}


def test_a_missing_subset_names_the_field_and_the_subsets() -> None:
    with pytest.raises(
        PermanentFailure, match=r"^dataset\.subset: .*no subset 'nope'; its subsets: main, socratic"
    ):
        _pin(GSM8K, subset="nope")
    with pytest.raises(
        PermanentFailure, match=r"^dataset\.subset: .*several subsets and none is the default"
    ):
        _pin(GSM8K, subset=None)


def test_a_missing_split_names_its_field_and_the_splits() -> None:
    with pytest.raises(
        PermanentFailure,
        match=r"^dataset\.eval_split: subset 'default' of .* has no split 'test'; its splits: train$",
    ):
        _pin(OPENR1)
    with pytest.raises(
        PermanentFailure, match=r"^dataset\.train_split: .*no split 'training'; its splits: train, test"
    ):
        _pin(GSM8K, subset="main", splits={"dataset.train_split": "training"})


def test_a_missing_revision_or_repo_names_its_field() -> None:
    with pytest.raises(PermanentFailure, match=r"^dataset\.revision: openai/gsm8k has no revision 'v9'"):
        _pin(GSM8K, "v9", subset="main")
    with pytest.raises(PermanentFailure, match=r"^dataset\.repo: org/absent does not exist"):
        _pin("org/absent")
    with pytest.raises(PermanentFailure, match=r"^dataset\.eval_repo: org/absent does not exist"):
        _pin("org/absent", fields=EVAL_FIELDS)


def test_a_gated_dataset_without_access_is_permanent_and_with_access_resolves(hub: HubDouble) -> None:
    with pytest.raises(PermanentFailure, match=r"^dataset\.repo: .* is gated .*accept the license"):
        _pin(GATED_DATASET)
    pinned = _pin(GATED_DATASET, token=GRANTED)
    assert pinned.gated is True and pinned.subset == "default"
    # no configs in its card: the default layout data/{split}-NNNNN-of-NNNNN.parquet places the files
    assert pinned.files == {
        "train": (_listed(hub, GATED_DATASET, "data/train-00000-of-00001.parquet"),),
        "test": (_listed(hub, GATED_DATASET, "data/test-00000-of-00001.parquet"),),
    }
    assert pinned.num_examples == {"train": None, "test": None} and pinned.features is None


@pytest.mark.parametrize("route", ["revision/main", "auth-check"])
@pytest.mark.parametrize("status", [500, 503, 429, 408])
def test_hub_trouble_is_transient(hub: HubDouble, route: str, status: int) -> None:
    prefix = f"/api/datasets/{GSM8K}/{route}"
    if status == 429:
        hub.rate_limit(path_prefix=prefix)
    else:
        hub.fail(prefix, status)
    with pytest.raises(TransientFailure, match=f"answered {status}"):
        _pin(GSM8K, subset="main")
    assert _pin(GSM8K, subset="main").sha == _head(hub, GSM8K)  # one request failed, none retried


def test_a_silent_hub_is_transient_within_the_timeout(hub: HubDouble) -> None:
    hub.stall(f"/api/datasets/{GSM8K}/auth-check")
    try:
        with pytest.raises(TransientFailure, match="within 1 s"):
            resolve_dataset(GSM8K, "main", subset="main", splits=["train"], token=TOKEN, timeout=1)
    finally:
        hub.release_stalls()


def test_a_split_stored_as_jsonl_is_refused_with_the_fix() -> None:
    with pytest.raises(
        PermanentFailure, match=r"^dataset\.train_split: .*stored as \.jsonl.*parquet.*dataset\.revision"
    ):
        _pin("org/jsonl")
    assert [f.path for f in _pin("org/jsonl", splits={"dataset.eval_split": "test"}).files["test"]] == [
        "data/test.parquet"
    ]


@pytest.mark.parametrize(
    ("repo", "expected"),
    [
        (
            "org/dirs",
            {"train": ["data/train/a.parquet", "data/train/b.parquet"], "test": ["data/test/c.parquet"]},
        ),
        ("org/names", {"train": ["my-train.parquet"], "test": ["eval_set.parquet"]}),
    ],
)
def test_the_default_layout_without_configs(repo: str, expected: dict[str, list[str]]) -> None:
    pinned = _pin(repo)
    assert {split: [f.path for f in files] for split, files in pinned.files.items()} == expected


def test_without_split_names_every_data_file_is_train() -> None:
    pinned = _pin("org/flat", splits=["train"])
    assert [f.path for f in pinned.files["train"]] == ["data.parquet", "more/extra.parquet"]
    with pytest.raises(PermanentFailure, match=r"^dataset\.split: .*no split 'test'; its splits: train$"):
        _pin("org/flat", splits=["test"])
    with pytest.raises(
        PermanentFailure, match=r"^dataset\.subset: .*no subset 'main'.*only subset is 'default'"
    ):
        _pin("org/flat", subset="main", splits=["train"])


def test_config_globs_follow_datasets() -> None:
    shallow = _pin("org/globs", subset="shallow", splits=["train"])
    assert [f.path for f in shallow.files["train"]] == [
        "data/a.parquet"
    ]  # * stays in data/, no .hidden, no .md
    deep = _pin("org/globs", subset="deep")
    assert [f.path for f in deep.files["train"]] == ["data/a.parquet", "data/deep/b.parquet"]
    assert [f.path for f in deep.files["test"]] == ["holdout/c.parquet"]
    with pytest.raises(PermanentFailure, match=r"^dataset\.subset: .*'data/missing\.parquet'.*no such file"):
        _pin("org/globs", subset="broken", splits=["train"])
    with pytest.raises(
        PermanentFailure, match=r"^dataset\.split: .*'train' of subset 'empty'.*has no data files"
    ):
        _pin("org/globs", subset="empty", splits=["train"])
    # no subset asked: the config marked default; its data_dir holds a default layout (all → train)
    marked = _pin("org/globs", splits=["train"])
    assert marked.subset == "dir" and [f.path for f in marked.files["train"]] == ["holdout/c.parquet"]


def test_glob_segments() -> None:
    paths = [
        "a.parquet",
        "d/a.parquet",
        "d/e/a.parquet",
        ".h/a.parquet",
        "__x/a.parquet",
        "README.md",
        "d/t1.csv",
    ]
    assert _glob("*.parquet", paths) == ["a.parquet"]
    assert _glob("**/*.parquet", paths) == ["a.parquet", "d/a.parquet", "d/e/a.parquet"]
    assert _glob(".h/*", paths) == [".h/a.parquet"] and _glob("__x/*", paths) == ["__x/a.parquet"]
    assert _glob("d/t[0-9].csv", paths) == ["d/t1.csv"] and _glob("d/t[!0-9].csv", paths) == []
    assert _glob("**", paths) == ["a.parquet", "d/a.parquet", "d/e/a.parquet", "d/t1.csv"]
    assert _glob("README.md", paths) == ["README.md"]


def test_the_record_round_trips_through_json() -> None:
    pinned = _pin(OPENR1, subset="extended", splits={"dataset.train_split": "train"})
    record = json.loads(json.dumps(pinned.as_record()))
    assert PinnedDataset.from_record(record) == pinned
    assert record["files"]["train"][0].keys() == {"path", "size", "sha256"}
    assert pinned.total_bytes() == sum(f["size"] for f in record["files"]["train"])


# ---- the model look-up keeps its messages -------------------------------------------------------


def test_the_model_look_up_keeps_its_messages(hub: HubDouble) -> None:
    assert resolve_revision("org/model", "main", TOKEN, timeout=5) == hub.repos["org/model"].branches["main"]
    with pytest.raises(
        PermanentFailure, match=r"^org/gated-model is gated and the pipeline's token has no access: accept"
    ):
        resolve_revision("org/gated-model", "main", TOKEN, timeout=5)
    with pytest.raises(PermanentFailure, match=r"^org/model has no revision 'v9'$"):
        resolve_revision("org/model", "v9", TOKEN, timeout=5)
    with pytest.raises(PermanentFailure, match=r"^org/none does not exist or is private to another account$"):
        resolve_revision("org/none", "main", TOKEN, timeout=5)
    hub.fail("/api/models/org/model/auth-check", 502)
    with pytest.raises(TransientFailure, match=r"^Hugging Face answered 502 for org/model@main$"):
        resolve_revision("org/model", "main", TOKEN, timeout=5)


def test_check_access_takes_the_repo_type(hub: HubDouble) -> None:
    check_access(hub.url, GSM8K, token=TOKEN, timeout=5, repo_type="dataset")
    assert hub.paths(f"/api/datasets/{GSM8K}/auth-check")
    with pytest.raises(ValueError, match="repo_type"):
        check_access(hub.url, GSM8K, token=TOKEN, timeout=5, repo_type="datasets")


def test_dataset_files_builds_a_card_without_configs_when_asked() -> None:
    files = dataset_files({"default": {"train": [{"q": "a"}]}}, configs_in_card=False)
    assert "configs" not in files["README.md"].body().decode()
    assert set(files) == {".gitattributes", "README.md", "data/train-00000-of-00001.parquet"}
