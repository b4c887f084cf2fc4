from django.db import migrations


def schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period="seconds")
    PeriodicTask.objects.update_or_create(
        name="recovery loop: dispatch due cluster cycles",
        defaults={"task": "recovery_console.tasks.dispatch_cycles", "interval": every_second},
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(
        task="recovery_console.tasks.dispatch_cycles"
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("detection", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(schedule, unschedule)]
