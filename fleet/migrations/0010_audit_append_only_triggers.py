"""On MySQL/MariaDB the database itself refuses UPDATE and DELETE on the audit table (see the
README for the grants that go with it). Needs the TRIGGER privilege (and, with binary logging,
SUPER or log_bin_trust_function_creators) for the user that migrates. Nothing on SQLite."""

from django.db import migrations

from fleet.audit import drop_append_only_triggers, install_append_only_triggers


def install(apps, schema_editor):
    install_append_only_triggers(schema_editor.execute, schema_editor.connection.vendor)


def drop(apps, schema_editor):
    drop_append_only_triggers(schema_editor.execute, schema_editor.connection.vendor)


class Migration(migrations.Migration):
    dependencies = [("recovery_console", "0009_audit_entries_keyed")]
    # Not atomic: MySQL commits DDL at once, and Django refuses DDL inside a transaction there.
    operations = [migrations.RunPython(install, drop, atomic=False)]
