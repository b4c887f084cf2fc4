"""The loop's periodic task is named for what it is, not for the module it lives in."""

from django.db import migrations

OLD, NEW = "recovery_console.tasks.dispatch_cycles", "recovery_console.dispatch_cycles"


def rename(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(task=OLD).update(task=NEW)


def rename_back(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(task=NEW).update(task=OLD)


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0002_tables_renamed_for_the_console"),
        ("detection", "0002_dispatch_cycles_every_second"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(rename, rename_back)]
