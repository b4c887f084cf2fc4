"""Beat exports the audit trail's anchor (its head) every five minutes, to AUDIT_ANCHOR_FILE and
the log, so ``verify_audit --anchor`` can tell a truncated or re-hashed trail."""

from django.db import migrations

TASK = "recovery_console.export_audit_anchor"


def schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    every, _ = IntervalSchedule.objects.get_or_create(every=5, period="minutes")
    apps.get_model("django_celery_beat", "PeriodicTask").objects.update_or_create(
        name="audit trail: export its anchor", defaults={"task": TASK, "interval": every}
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(task=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("recovery_console", "0010_audit_append_only_triggers"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(schedule, unschedule)]
