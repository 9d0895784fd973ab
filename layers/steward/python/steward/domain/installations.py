"""GitHub App installations as Steward knows them: who owns each, which repositories it
holds, whether it is suspended. Webhooks keep this true; an operator links owners."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Installation(BaseModel):
    model_config = ConfigDict(frozen=True)

    installation_id: int = Field(gt=0)
    owner_sub: str | None = None
    account: str | None = None
    repositories: tuple[str, ...] = ()
    suspended: bool = False
    # Deliveries stamped alike disagreed about it: the loop re-reads it from GitHub.
    needs_refresh: bool = False

    def lists(self, repo: str) -> bool:
        """`repo` (owner/name, compared case-insensitively as GitHub does) is among its
        repositories, suspended or not."""
        return repo.lower() in {r.lower() for r in self.repositories}

    def holds(self, repo: str) -> bool:
        """Live and holding `repo`."""
        return not self.suspended and self.lists(repo)
