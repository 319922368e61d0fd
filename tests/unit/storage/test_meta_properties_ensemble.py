"""MetaPropertiesEnsemble: the log dirs' meta.properties read together and verified with
Kafka's rules (MetaPropertiesEnsemble.verify)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tiercel.storage.meta_properties import MetaProperties, random_directory_id
from tiercel.storage.meta_properties_ensemble import MetaPropertiesEnsemble, MetaPropertiesError

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


def test_directories_are_formatted_empty_or_in_error(tmp_path: Path) -> None:
    a, b, c = (str(tmp_path / n) for n in "abc")
    (tmp_path / "a").mkdir()
    MetaProperties(CLUSTER, 1, random_directory_id()).write(a)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "meta.properties").write_text("node.id=1\n")
    ensemble = MetaPropertiesEnsemble.load([a, b, c], metadata_log_dir=a)
    assert set(ensemble.log_dir_props) == {a} and ensemble.empty_log_dirs == {b}
    assert "cluster.id was not specified" in ensemble.error_log_dirs[c]
    ensemble.verify(CLUSTER, 1)
    with pytest.raises(MetaPropertiesError, match="Encountered I/O error in metadata log"):
        MetaPropertiesEnsemble.load([a, c], metadata_log_dir=c).verify(None, None)
    with pytest.raises(MetaPropertiesError, match=r"No readable meta\.properties files found"):
        MetaPropertiesEnsemble.load([b]).verify(None, None, require_at_least_one_valid=True)
    with pytest.raises(MetaPropertiesError, match="No metadata log directory was specified"):
        MetaPropertiesEnsemble.load([a]).verify(None, None, require_metadata_log_dir=True)


def test_directory_ids_must_be_distinct_and_not_reserved(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    shared = random_directory_id()
    for d in dirs:
        d.mkdir()
        MetaProperties(CLUSTER, 1, shared).write(str(d))
    with pytest.raises(MetaPropertiesError, match="Duplicate directory ID"):
        MetaPropertiesEnsemble.load(map(str, dirs)).verify(None, None)
    MetaProperties(CLUSTER, 1, uuid.UUID(int=1)).write(str(dirs[1]))
    with pytest.raises(MetaPropertiesError, match="Invalid reserved directory ID"):
        MetaPropertiesEnsemble.load(map(str, dirs)).verify(None, None)
