"""Read NCBI PubMed baseline/update files (pubmed25n0001.xml.gz ...) as a stream of Articles.

The files are PubmedArticleSet documents of ~30,000 records (~200 MB unzipped); they are read
block by block with constant memory, and each record goes through the same extraction code as
efetch replies (`parse.article_from_record`). `DeleteCitation` entries in update files are
skipped (they list PMIDs withdrawn since the baseline).

Nothing a file names is fetched or read (DTDs, external entities: `article_xml`), and a file that is
not a PubmedArticleSet, or holds no record that can be read, is an error naming it (`XMLParseError`,
which `biocheck evidence build` reports in one line), never "read 0 articles".
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from biocheck.evidence.article_xml import (
    MissingDTDError,
    NotPubMedXMLError,
    UnsafeXMLError,
    XMLParseError,
    article_from_record,
    iter_pubmed_records,
)
from biocheck.evidence.types import Article

logger = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"
NOT_BASELINE = ("give NCBI PubMed baseline or update files (PubmedArticleSet XML such as pubmed25n0001.xml.gz, "
                "https://ftp.ncbi.nlm.nih.gov/pubmed/baseline/)")


def _open(path: Path):
    # Trust the bytes, not the suffix: a ".xml" may be gzipped and vice versa.
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == _GZIP_MAGIC
    return gzip.open(path, "rb") if gzipped else open(path, "rb")


def iter_baseline(path: str | Path) -> Iterator[Article]:
    """Articles of one baseline/update file, gzipped or not; source = "baseline:<filename>"."""
    path = Path(path)
    source = f"baseline:{path.name}"
    count = records = 0
    with _open(path) as stream:
        try:
            for record in iter_pubmed_records(stream):
                records += 1
                article = article_from_record(record, source)
                if article is not None:
                    count += 1
                    yield article
        except (NotPubMedXMLError, UnsafeXMLError) as exc:
            raise type(exc)(f"{path}: {exc}; {NOT_BASELINE}") from None
        except (XMLParseError, MissingDTDError, ValueError) as exc:  # Biopython says ValueError for odd XML
            raise XMLParseError(f"{path}: {exc} (after {count} articles); re-download the file") from None
        except (EOFError, OSError) as exc:  # gzip stream cut short or corrupt
            raise XMLParseError(f"{path}: cannot read ({exc}) after {count} articles; re-download the file") from None
    if records and not count:
        raise NotPubMedXMLError(f"{path}: none of its {records} PubMed records has the expected fields; "
                                f"{NOT_BASELINE}")
    logger.info("read %d articles from %s", count, path)


def check_baseline(path: str | Path) -> None:
    """Raise XMLParseError (naming the file) unless `path` reads as a PubMed file: parsed up to its first
    article only, so a wrong file is refused before a build writes anything."""
    stream = iter_baseline(path)
    try:
        next(stream, None)
    finally:
        stream.close()


def iter_baseline_files(paths: Iterable[str | Path]) -> Iterator[Article]:
    """Articles of several files, in the order given."""
    for path in paths:
        yield from iter_baseline(path)
