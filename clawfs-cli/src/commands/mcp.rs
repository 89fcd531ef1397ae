//! `clawfs mcp --agent NAME`: the agent tools as an MCP server on standard input and output, for
//! MCP clients (editors, agent harnesses) to use ClawFS directly.
//!
//! The server is the ClawFS tool set, nothing more: it runs as the agent — started like
//! `clawfs run` (the agent's cgroup, uid and sandbox) — and answers every `tools/call` by calling
//! the tool through the mount (`tools/call/<tool>`), so the daemon identifies, decides and audits
//! each call exactly as it does an agent's own file calls. The server holds no privilege and sees
//! nothing the agent could not.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;

use crate::error::Failure;
use clawfs_args::mcp::{McpArgs, ServeArgs, ToolSet};
use clawfs_args::run::RunArgs;

use crate::commands::run;

/// `clawfs mcp`: starts the server as the agent, with standard input and output passed through
/// to it. Returns the server's exit code.
pub fn mcp(args: &McpArgs) -> Result<u8, Failure> {
    run::require_root()?;
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("finding the clawfs binary to run as the agent")?;
    let arg = |s: &str| OsString::from(s);
    let run_args = RunArgs {
        agent: args.agent.clone(),
        workspace: Some(args.workspace.clone()),
        user: None,
        mount: args.mount.clone(),
        no_sandbox: args.no_sandbox,
        sandbox: false,
        store: args.store.clone(),
        command: Vec::new(),
    };
    let mut spec = run::spec_from_args(&run_args)?;
    let mount = spec
        .mount
        .clone()
        .expect("found: a run with a workspace needs the mount");
    spec.command = vec![
        exe.clone().into_os_string(),
        arg("mcp-serve"),
        arg("--mount"),
        mount.into_os_string(),
        arg("--workspace"),
        arg(&args.workspace),
        arg("--agent"),
        arg(&args.agent),
        arg("--tools"),
        arg(match args.tools {
            ToolSet::Lean => "lean",
            ToolSet::Full => "full",
        }),
    ];
    spec.programs.push(exe);
    run::execute(&spec)
}

/// MCP filesystem-server tool names and the ClawFS tool each one is. They are accepted in
/// `tools/call` (their argument names are accepted by the tools), and listed, with the schema
/// of the tool they are, in the full set.
const MCP_NAMES: &[(&str, &str)] = &[
    ("read_text_file", "read_file"),
    ("create_directory", "create_folder"),
    ("list_directory", "list_files"),
    ("list_directory_with_sizes", "list_files"),
    ("move_file", "move"),
    ("list_allowed_directories", "list_allowed"),
];

/// The server: the tool definitions read from the mount, and where to call them.
struct Server {
    call_dir: PathBuf,
    workspace: String,
    agent: String,
    /// Every tool that can be called.
    tools: Arc<Vec<Tool>>,
    /// The tools listed.
    listed: Arc<Vec<Tool>>,
    /// The published WebAssembly tools among `tools`: their requests are theirs alone.
    published: std::collections::HashSet<String>,
}

impl Server {
    /// Reads the registry through the mount, as the agent.
    fn new(args: &ServeArgs) -> anyhow::Result<Server> {
        let tools_dir = args.mount.join("tools");
        let path = tools_dir.join("registry.json");
        let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let registry: Value = serde_json::from_slice(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        let defs = registry["tools"]
            .as_array()
            .ok_or_else(|| anyhow!("{} lists no tools", path.display()))?;
        let mut tools: Vec<Tool> = defs.iter().filter_map(tool_of).collect();
        let published = published_tools(&tools_dir, &registry);
        tools.extend(published.iter().cloned());
        let lean: Vec<&str> = registry["lean_tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let listed = match args.tools {
            ToolSet::Lean => tools
                .iter()
                .filter(|t| {
                    lean.contains(&t.name.as_ref()) || published.iter().any(|p| p.name == t.name)
                })
                .cloned()
                .collect(),
            ToolSet::Full => {
                let mut all = tools.clone();
                all.extend(MCP_NAMES.iter().filter_map(|(alias, ours)| {
                    let t = tools.iter().find(|t| t.name == *ours)?;
                    let mut aliased = t.clone();
                    aliased.name = (*alias).into();
                    aliased.description = Some(
                        format!(
                            "{} (The filesystem-server name of {ours}.)",
                            t.description.as_deref().unwrap_or_default()
                        )
                        .into(),
                    );
                    Some(aliased)
                }));
                all
            }
        };
        Ok(Server {
            call_dir: tools_dir.join("call"),
            workspace: args.workspace.clone(),
            agent: args.agent.clone(),
            tools: Arc::new(tools),
            listed: Arc::new(listed),
            published: published.into_iter().map(|t| t.name.to_string()).collect(),
        })
    }

    /// The ClawFS tool a requested name is, if any.
    fn resolve(&self, name: &str) -> Option<String> {
        let name = MCP_NAMES
            .iter()
            .find(|(mcp, _)| *mcp == name)
            .map_or(name, |(_, ours)| ours);
        self.tools
            .iter()
            .any(|t| t.name == name)
            .then(|| name.to_string())
    }
}

/// The published WebAssembly tools of the registry (one per id), each described by its
/// definition as the mount serves it: its `description` and `input_schema` when it has them.
fn published_tools(tools_dir: &Path, registry: &Value) -> Vec<Tool> {
    let mut ids: Vec<&str> = registry["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["wasm_path"].is_string())
        .filter_map(|p| p["tool_id"].as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .map(|id| {
            let def: Value = std::fs::read(tools_dir.join(format!("definitions/tool-{id}.json")))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            let description = def["description"].as_str().map_or_else(
                || format!("The published WebAssembly tool {id}: JSON in, JSON out."),
                str::to_string,
            );
            let schema = def["input_schema"].as_object().cloned().unwrap_or_else(|| {
                serde_json::json!({"type": "object"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
            });
            Tool::new(id.to_string(), description, Arc::new(schema))
        })
        .collect()
}

/// An MCP tool from a registry definition: its `name`, `description`, `input_schema`,
/// `annotations` and, for answers given as structured content (all but media), its
/// `output_schema`.
fn tool_of(def: &Value) -> Option<Tool> {
    let name = def["name"].as_str()?.to_string();
    let description = def["description"].as_str().unwrap_or_default().to_string();
    let schema: JsonObject = def["input_schema"].as_object()?.clone();
    let mut tool = Tool::new(name.clone(), description, Arc::new(schema));
    if let Ok(annotations) = serde_json::from_value(def["annotations"].clone()) {
        tool = tool.with_annotations(annotations);
    }
    match def["output_schema"].as_object() {
        Some(output) if name != "read_media_file" => {
            Some(tool.with_raw_output_schema(Arc::new(output.clone())))
        }
        _ => Some(tool),
    }
}

/// Calls `tool` through the mount: writes the request on a `tools/call/<tool>` descriptor and
/// reads the response from it.
fn call_through_mount(call_dir: &Path, tool: &str, request: &Value) -> std::io::Result<Value> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(call_dir.join(tool))?;
    match f.write_all(request.to_string().as_bytes()) {
        // Over the request limit: the daemon answers (and audits) too_large on the read.
        Err(e) if e.raw_os_error() == Some(libc::EFBIG) => {}
        other => other?,
    }
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    serde_json::from_slice(&out).map_err(std::io::Error::other)
}

/// The MCP result of a tool's response: media as image or audio content, everything else as
/// the response's JSON, both as text and as structured content. A refusal is a tool error
/// (`isError`), which a model can read and act on, not a protocol error.
fn result_of(tool: &str, response: Value) -> CallToolResult {
    if response["ok"] != Value::Bool(true) {
        return CallToolResult::structured_error(response);
    }
    if tool == "read_media_file" {
        let data = response["data"].as_str().unwrap_or_default().to_string();
        let mime = response["mime_type"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match response["kind"].as_str() {
            Some("image") => return CallToolResult::success(vec![ContentBlock::image(data, mime)]),
            Some("audio") => return CallToolResult::success(vec![ContentBlock::audio(data, mime)]),
            _ => {}
        }
    }
    CallToolResult::structured(response)
}

impl ServerHandler for Server {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("clawfs", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "The files of ClawFS workspace '{}' (another with a \"workspace\" argument; list_allowed and a refusal name those you may use), as agent {}. Paths are relative to the workspace. Every call runs as the agent, under its policy, and is audited. Read with read_file (it returns the file's sha256), find text with search_files and names with find_files, change with edit_file or apply_patch (pass the sha256 as base_sha256).",
                self.workspace, self.agent
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.listed.as_ref().clone(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(tool) = self.resolve(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool '{}'; tools/list names the tools",
                    request.name.chars().take(64).collect::<String>()
                ),
                None,
            ));
        };
        // The server's workspace unless the call names one: the daemon decides (and audits)
        // whether the agent may work there, as for any call through the mount.
        let mut args = request.arguments.unwrap_or_default();
        if !self.published.contains(&tool) {
            args.entry("workspace")
                .or_insert_with(|| Value::String(self.workspace.clone()));
        }
        let call_dir = self.call_dir.clone();
        let name = tool.clone();
        let response = tokio::task::spawn_blocking(move || {
            call_through_mount(&call_dir, &name, &Value::Object(args))
        })
        .await
        .map_err(|e| ErrorData::internal_error(format!("the call did not finish: {e}"), None))?
        .map_err(|e| {
            ErrorData::internal_error(
                format!("calling {tool} through the mount failed: {e}"),
                None,
            )
        })?;
        Ok(result_of(&tool, response).into())
    }
}

/// `clawfs mcp-serve`: the server, on standard input and output, until the client closes them.
pub fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let server = Server::new(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the server's runtime")?;
    runtime.block_on(async move {
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| anyhow!("the MCP client did not initialise: {e}"))?;
        running
            .waiting()
            .await
            .map_err(|e| anyhow!("the server stopped: {e}"))?;
        Ok(())
    })
}
