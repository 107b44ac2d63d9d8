"""agent-saga adopt: tools found by parsing (never importing); the written module refuses to import until decided."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent_saga.cli.main import main
from agent_saga.cli.toolscan import hint, index_project

# A project using every framework adopt knows. None of these frameworks is installed
# here: importing any of its modules would fail, so a run that succeeds never imported one.
SAMPLE = {
    "app/__init__.py": "",
    "app/tools.py": """
        from pathlib import Path
        from langchain_core.tools import tool
        from langchain_core.tools import BaseTool as LCBase

        Path("IMPORTED").write_text("adopt imported the project")

        @tool
        def send_welcome_email(address: str) -> str:
            return "sent"

        @tool("lookup_order")
        def find_order(order_id: str) -> dict:
            return {}

        class Provisioner(LCBase):
            name: str = "create_server"
    """,
    "app/crew.py": """
        from crewai.tools import BaseTool, tool

        @tool("Refund customer")
        def refund_customer(charge_id: str) -> str:
            return "refunded"

        class SearchTool(BaseTool):
            name: str = "web_search"
    """,
    "app/openai_agent.py": """
        import agents

        @agents.function_tool
        def book_flight(flight: str) -> str:
            return "booked"

        @agents.function_tool(name_override="cancel")
        def cancel_booking(booking: str) -> str:
            return "cancelled"
    """,
    "app/llama.py": """
        from llama_index.core.tools import FunctionTool

        def create_ticket(title: str) -> str:
            return "T-1"

        def delete_user(user: str) -> None: ...

        ticket_tool = FunctionTool.from_defaults(fn=create_ticket, name="open_ticket")

        def build():
            return FunctionTool.from_defaults(fn=delete_user)
    """,
    "src/billing/__init__.py": "",
    "src/billing/autogen_tools.py": """
        from autogen_core.tools import FunctionTool as FT

        def charge_card(amount: int) -> str:
            return "ch_1"

        charge_tool = FT(charge_card, description="charge a card")
    """,
    "app/kernel.py": """
        from semantic_kernel.functions import kernel_function

        class Billing:
            @kernel_function(name="issue_invoice")
            def invoice(self, customer: str) -> str:
                return "inv"

            @kernel_function
            def get_balance(self, customer: str) -> int:
                return 0

            def helper(self) -> None: ...
    """,
    "app/server.py": """
        from mcp.server.fastmcp import FastMCP

        crm = FastMCP("crm")

        @crm.tool()
        def create_contact(email: str) -> str:
            return "c-1"

        @crm.tool(name="remove_contact")
        def delete_contact(contact: str) -> None: ...
    """,
    "tests/test_app.py": """
        from langchain_core.tools import tool

        @tool
        def fixture_tool() -> None: ...
    """,
    "broken.py": "def oops(:\n",
}

EXPECTED = {  # key -> (framework, kind, name)
    "app.tools.send_welcome_email": ("langchain", "LangChain @tool", "send_welcome_email"),
    "app.tools.find_order": ("langchain", "LangChain @tool", "lookup_order"),
    "app.tools.Provisioner": ("langchain", "LangChain BaseTool subclass", "create_server"),
    "app.crew.refund_customer": ("crewai", "CrewAI @tool", "Refund customer"),
    "app.crew.SearchTool": ("crewai", "CrewAI BaseTool subclass", "web_search"),
    "app.openai_agent.book_flight": ("openai_agents", "OpenAI Agents @function_tool", "book_flight"),
    "app.openai_agent.cancel_booking": ("openai_agents", "OpenAI Agents @function_tool", "cancel"),
    "app.llama.ticket_tool": ("llamaindex", "LlamaIndex FunctionTool.from_defaults(...)", "open_ticket"),
    "app.llama.delete_user": ("llamaindex", "LlamaIndex FunctionTool.from_defaults(...)", "delete_user"),
    "billing.autogen_tools.charge_tool": ("autogen", "AutoGen FunctionTool(...)", "charge_card"),
    "app.kernel.Billing.invoice": ("semantic_kernel", "Semantic Kernel @kernel_function", "issue_invoice"),
    "app.kernel.Billing.get_balance": ("semantic_kernel", "Semantic Kernel @kernel_function", "get_balance"),
    "app.server.create_contact": ("mcp", "MCP server @tool()", "create_contact"),
    "app.server.delete_contact": ("mcp", "MCP server @tool()", "remove_contact"),
}


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def adopt(root: Path, *args: str) -> int:
    return main(["adopt", "--root", str(root), "--out", str(root / "saga_tools.py"), *args])


def import_module(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import saga_tools"], cwd=root, capture_output=True,
                          text=True, check=False)


def test_it_finds_every_frameworks_tools_without_importing_the_project(tmp_path: Path) -> None:
    root = write(tmp_path, SAMPLE)
    index = index_project(root)
    assert {t.key: (t.framework, t.kind, t.name) for t in index.tools} == EXPECTED
    assert set(index.frameworks) == {"langchain", "crewai", "openai_agents", "llamaindex", "autogen",
                                     "semantic_kernel", "mcp"}
    assert [u.split(":")[0] for u in index.unparsable] == ["broken.py"]
    send = next(t for t in index.tools if t.function == "send_welcome_email")
    assert (send.path, send.line) == ("app/tools.py", 8)
    assert not (root / "IMPORTED").exists()


def test_the_written_module_refuses_to_import_until_every_tool_is_decided(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write(tmp_path, SAMPLE)
    assert adopt(root) == 0
    printed = capsys.readouterr().out
    assert "14 tool(s) found" in printed
    assert ("  app.tools.send_welcome_email  (LangChain @tool, app/tools.py line 8)\n"
            "      hint: the name contains 'send', which usually means no automated undo exists -- consider\n"
            "      IRREVERSIBLE, which is gated before it runs rather than undone after. A hint, not a\n"
            "      classification.") in printed
    assert not (root / "IMPORTED").exists()
    module = (root / "saga_tools.py").read_text()
    compile(module, "saga_tools.py", "exec")
    assert module.count(": DECIDE,") == len(EXPECTED)

    refused = import_module(root)
    assert refused.returncode == 1
    assert f"Undecided: saga_tools: {len(EXPECTED)} tool(s) still have semantics=DECIDE: " in refused.stderr
    for key in EXPECTED:
        assert key in refused.stderr
    assert not (root / "IMPORTED").exists()  # refused before any of the project's modules was imported

    # Decide all but one: still refused, naming just that one.
    last = "'app.server.delete_contact': DECIDE,"
    (root / "saga_tools.py").write_text(module.replace(": DECIDE,", ': "IRREVERSIBLE",').replace(
        last.replace("DECIDE", '"IRREVERSIBLE"'), last))
    refused = import_module(root)
    assert "1 tool(s) still have semantics=DECIDE: app.server.delete_contact." in refused.stderr

    # A value that is not a semantics is refused by name too.
    (root / "saga_tools.py").write_text(module.replace(": DECIDE,", ': "MAYBE",'))
    assert "unknown semantics 'MAYBE'" in import_module(root).stderr

    # All decided: the module goes on, to wrapping -- here it stops at the first adapter that is
    # not installed, and says which distribution to install.
    (root / "saga_tools.py").write_text(module.replace(": DECIDE,", ': "IRREVERSIBLE",'))
    went_on = import_module(root)
    assert "Undecided" not in went_on.stderr
    assert "is provided by the distribution 'agent-saga-" in went_on.stderr


def test_a_decided_mcp_module_imports_and_gives_a_policy_the_proxy_accepts(tmp_path: Path) -> None:
    from agent_saga.plugins.policy import ToolPolicy

    root = write(tmp_path, {"server.py": SAMPLE["app/server.py"]})
    assert adopt(root) == 0
    module = (root / "saga_tools.py").read_text()
    decided = module.replace("'server.create_contact': DECIDE", "'server.create_contact': \"REVERSIBLE\"")
    decided = decided.replace("'server.delete_contact': DECIDE", "'server.delete_contact': \"IRREVERSIBLE\"")
    (root / "saga_tools.py").write_text(decided)
    done = subprocess.run(
        [sys.executable, "-c", "import json, saga_tools; print(json.dumps(saga_tools.mcp_policy()))"],
        cwd=root, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    policy = json.loads(done.stdout)
    assert policy == {"mode": "enforce", "tools": {"create_contact": {"semantics": "REVERSIBLE"},
                                                   "remove_contact": {"semantics": "IRREVERSIBLE"}}}
    ToolPolicy.load(policy)  # the format the MCP proxy and patch_all read


def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write(tmp_path, {"plain.py": "def add(a, b):\n    return a + b\n", "agents/__init__.py": "",
                            "agents/run.py": "from agents import function_tool\n"})
    assert adopt(root) == 1  # nothing to adopt; a local package called `agents` is not the SDK
    out = capsys.readouterr().out
    assert "no tool found" in out and "frameworks imported: none" in out
    assert not (root / "saga_tools.py").exists()

    (root / "saga_tools.py").write_text("# decisions a person already made\n")
    assert adopt(root) == 2
    assert "exists and may hold decisions already made" in capsys.readouterr().err
    assert main(["adopt", "--root", str(root), "--out", str(root / "saga-tools.py")]) == 2


@pytest.mark.parametrize(("names", "expected"), [
    (("send_welcome_email",), "contains 'send'"),
    (("DeleteUser",), "contains 'delete'"),
    (("charge_card",), "contains 'charge'"),
    (("search_docs",), "contains 'search'"),
    (("create_ticket",), "contains 'create'"),
    (("frobnicate",), "nothing in the name suggests an answer"),
])
def test_hints_are_labelled_as_hints(names: tuple[str, ...], expected: str) -> None:
    text = hint(*names)
    assert expected in text and text.endswith("A hint, not a classification.")
