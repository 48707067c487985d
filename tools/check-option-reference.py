"""Every option the code registers is in the built configuration reference.

Run by ``tox -e docs`` after sphinx-build: the reference is generated
(``.. show-options::``), so what can go missing is a group whose options
are defined by an optional library absent from the docs environment
(``[neutron]`` needs keystoneauth1) or a namespace left out of the
directive. Exits 1 naming what is missing.
"""
import sys
from pathlib import Path

from oslo_config import generator

PAGE = Path("doc/build/html/configuration/reference.html")
NAMESPACES = ["kuryr_supervisor", "oslo.log"]


def main() -> int:
    html = PAGE.read_text()
    missing = []
    for _, groups in generator._list_opts(NAMESPACES):
        for group, opts in groups:
            name = getattr(group, "name", group) or "DEFAULT"
            for opt in opts:
                if f'id="{name}.{opt.dest}"' not in html:
                    missing.append(f"[{name}] {opt.name}")
    if missing:
        print(f"{PAGE}: options missing: {', '.join(missing)}")
        return 1
    print(f"{PAGE}: every option of {', '.join(NAMESPACES)} is there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
