"""Helpers shared by several test packages. Import them by name (``from tests.helpers.bank
import ...``); conftest.py files hold only fixtures."""
