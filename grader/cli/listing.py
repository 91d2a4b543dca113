"""`kcourse list`: a plan, its weeks/days, exercises and the learner's status."""

from __future__ import annotations

import click

from grader.core.discovery import ResolveError


@click.command("list")
@click.option("--plan", "plan_id", help="Show this plan (default: the default plan, the 11-week one).")
@click.option("--all", "show_all", is_flag=True, help="Show every plan.")
def list_command(plan_id, show_all) -> None:
    """A plan, its weeks/days, exercises and your status (your best grade; the latest too where it differs)."""
    from grader.commands import listing

    try:
        click.echo(listing.format_plans(plan_id, show_all))
    except ResolveError as exc:
        raise click.UsageError(str(exc)) from None
