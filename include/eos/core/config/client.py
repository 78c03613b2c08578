"""A pipeline file's librdkafka settings (``kafka.client``, a Kafka sink's ``client``) checked
when it loads: each name and value by librdkafka's own parser, and no secret written in the
file.

librdkafka ignores nothing it does not know: a misspelt ``bootstrap.server`` makes the client
fail when it is built, which for a pipeline is the first epoch's plan (or, for a sink, its
commit). Building a client object parses the settings without reaching a broker, so the same
parser that will judge them at run time judges them at load time.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Annotated

from pydantic import AfterValidator

# ``${VAR}``: a value read from the environment where the client runs (``eos.core.kafka``).
ENV_REFERENCE = re.compile(r"\$\{([^}]*)\}")
# Settings whose values are credentials: librdkafka's passwords and secrets, a private key given
# inline, and the OAUTHBEARER config (it holds the unsecured JWS or a client secret).
SECRET_SETTING = re.compile(
    r"(password|secret|^ssl\.key\.pem$|^ssl_key$|^sasl\.oauthbearer\.config$)", re.IGNORECASE)
# The broker lists: never parsed (a client made with one connects).
_BROKER_LISTS = frozenset({"bootstrap.servers", "metadata.broker.list"})
# librdkafka's only word for a name it does not know; the code (_INVALID_ARG) is the same as
# for a bad value, so the text is what tells the two apart.
_UNKNOWN = "No such configuration property"
# A value that parses for every librdkafka type, to ask about a name alone (its real value is
# only known where the client runs).
_NAME_PROBES = ("1", "true", "")

# What librdkafka says when every setting parsed but a client cannot be made of them.
_NOT_ALONE = "Failed to create"
_QUOTED_VALUE = re.compile(r'Invalid value "[^"]*"')

Setting = str | int | float | bool


def _checked(settings: dict[str, Setting]) -> dict[str, Setting]:
    check_client(settings)
    return settings


def check_client(settings: Mapping[str, Setting]) -> None:
    """``ValueError`` naming the first setting that librdkafka does not know or would refuse,
    or that holds a literal secret (pydantic adds where the settings are). Each setting is
    parsed alone: at run time the settings join the Airflow connection's, which may complete
    a combination the file leaves half-made, so only what is wrong on its own is refused."""
    for name, value in settings.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError("a setting has an empty name")
        _refuse_literal_secret(name, value)
        if name in _BROKER_LISTS:
            continue  # a list of host:port, known to every librdkafka; never parsed (a client
            # built with it would connect)
        if isinstance(value, str) and ENV_REFERENCE.search(value):
            problem = _name_problem(name)
        else:
            problem = _parse(name, value)
        if problem:
            raise ValueError(f"setting {name}: {problem}")


def _refuse_literal_secret(name: str, value: Setting) -> None:
    """A credential is given as ``${VAR}`` alone: a literal one would sit in a file that goes
    to version control, the DAG's source view and every task's parsed config."""
    if not SECRET_SETTING.search(name):
        return
    if isinstance(value, str) and ENV_REFERENCE.fullmatch(value.strip()):
        return
    raise ValueError(f"setting {name} holds a secret: give it as ${{VARIABLE}} and set the "
                     "variable where the client runs (or use the Airflow kafka connection), "
                     "never in the file")


def _name_problem(name: str) -> str | None:
    """Whether librdkafka knows ``name`` at all, for a value only the environment knows."""
    problems = [_parse(name, probe) for probe in _NAME_PROBES]
    if all(p is not None and _UNKNOWN in p for p in problems):
        return problems[0]
    return None


@lru_cache(maxsize=None, typed=True)  # pure in one setting (1 and True apart): a DAG file's
# every parse asks again
def _parse(name: str, value: Setting) -> str | None:
    """librdkafka's word on one setting: None when it parses. A consumer with no broker list is
    built and closed at once: it contacts no broker (it has none to contact), and a consumer
    takes every general setting; a producer-only setting only draws a warning, not kept."""
    # The C type itself: what librdkafka parses with, whatever wraps the package's name.
    from confluent_kafka.cimpl import Consumer, KafkaException

    quiet = logging.getLogger("eos.core.config.client.librdkafka")
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    try:
        Consumer({"group.id": "eos-validate", "logger": quiet, name: value}).close()
    except KafkaException as error:
        text = str(error.args[0].str())
        if text.startswith(_NOT_ALONE):
            # The setting parsed; a client cannot be made of it alone (e.g. a SASL protocol
            # without its mechanism): not this check's to judge.
            return None
        # librdkafka quotes a refused value; the message names the setting, never its value.
        return _QUOTED_VALUE.sub("Invalid value", text)
    except (TypeError, ValueError) as error:  # a value of a type librdkafka takes no type of
        return str(error)
    return None


# A config's librdkafka settings (``kafka.client``, a Kafka sink's ``client``), checked when it
# loads.
ClientSettings = Annotated[dict[str, Setting], AfterValidator(_checked)]
