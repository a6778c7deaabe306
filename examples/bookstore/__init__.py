"""A bookstore with two tenants: the example app behind `handrail demo`.

Books, inventory and orders of the tenants "acme" and "globex" live in one SQLite
file; every query is scoped to the calling Principal's tenant.
"""

from examples.bookstore.app import TENANTS, BookstoreApp, build_app
from examples.bookstore.data import BookstoreDb, TenantCatalog
from examples.bookstore.tools import SearchFilters, build_tools

__all__ = [
    "TENANTS",
    "BookstoreApp",
    "BookstoreDb",
    "SearchFilters",
    "TenantCatalog",
    "build_app",
    "build_tools",
]
