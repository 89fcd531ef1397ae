//! The terminal view of `clawfs top` (ratatui): a table of the agents, the runs of the one
//! selected (of all when none is), and the keys. Redrawn at each sample and at each key.
//!
//! Keys: `q` quits; `s` sorts by the next column; `/` starts a filter by agent name (typed,
//! Enter keeps it, Esc drops it); Up and Down select an agent; Esc clears the selection.

use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use super::sample::{Sample, Sampler};
use super::{cells, Order, HEADERS};

/// What the view shows besides the sample.
struct State {
    order: Order,
    /// The filter being typed after `/`, if one is.
    typing: Option<String>,
    table: TableState,
    /// The agent selected, by name (the rows move as they sort).
    selected: Option<String>,
}

/// Runs the view until `q`, refreshing every `interval`.
pub(super) fn run(sampler: &mut Sampler, interval: Duration, order: Order) -> anyhow::Result<()> {
    let mut terminal = ratatui::init();
    let out = (|| -> anyhow::Result<()> {
        let mut state = State {
            order,
            typing: None,
            table: TableState::default(),
            selected: None,
        };
        // The first sample at once, then one per interval.
        let mut sample = sampler.sample(Duration::ZERO)?;
        let mut next = Instant::now() + interval;
        loop {
            let mut shown = Sample {
                agents: sample.agents.clone(),
                time: sample.time.clone(),
                store: sample.store.clone(),
                seconds: sample.seconds,
            };
            state.order.apply(&mut shown.agents);
            terminal.draw(|f| draw(f, &shown, &mut state))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Press
                        && !key(&mut state, k.code, k.modifiers, &shown)
                    {
                        return Ok(());
                    }
                }
                continue;
            }
            sample = sampler.sample(Duration::ZERO)?;
            next = Instant::now() + interval;
        }
    })();
    ratatui::restore();
    out
}

/// Applies a key; `false` to quit.
fn key(state: &mut State, code: KeyCode, mods: KeyModifiers, shown: &Sample) -> bool {
    if let Some(typed) = &mut state.typing {
        match code {
            KeyCode::Enter => state.typing = None,
            KeyCode::Esc => {
                state.typing = None;
                state.order.filter.clear();
            }
            KeyCode::Backspace => {
                typed.pop();
                state.order.filter = typed.clone();
            }
            KeyCode::Char(c) => {
                typed.push(c);
                state.order.filter = typed.clone();
            }
            _ => {}
        }
        return true;
    }
    let at = state
        .selected
        .as_ref()
        .and_then(|s| shown.agents.iter().position(|a| &a.agent == s));
    let pick = |i: usize| shown.agents.get(i).map(|a| a.agent.clone());
    match code {
        KeyCode::Char('q') => return false,
        KeyCode::Char('c') if mods.contains(KeyModifiers::CONTROL) => return false,
        KeyCode::Char('s') => state.order.sort = state.order.sort.next(),
        KeyCode::Char('/') => state.typing = Some(String::new()),
        KeyCode::Esc => state.selected = None,
        KeyCode::Down => {
            state.selected =
                pick(at.map_or(0, |i| (i + 1).min(shown.agents.len().saturating_sub(1))))
        }
        KeyCode::Up => state.selected = pick(at.map_or(0, |i| i.saturating_sub(1))),
        _ => {}
    }
    true
}

fn draw(f: &mut Frame, sample: &Sample, state: &mut State) {
    let [head, agents, runs, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Length(8),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let running: usize = sample.agents.iter().map(|a| a.processes).sum();
    f.render_widget(
        Paragraph::new(format!(
            "clawfs top — {} — {} — {} agents shown, {running} processes — sort: {}{}",
            sample.store.display(),
            sample.time,
            sample.agents.len(),
            state.order.sort.name(),
            match (&state.typing, state.order.filter.as_str()) {
                (Some(t), _) => format!(" — filter: {t}▏"),
                (None, "") => String::new(),
                (None, f) => format!(" — filter: {f}"),
            }
        )),
        head,
    );
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let header = Row::new(HEADERS.map(|h| match h == sort_column(state) {
        true => Cell::from(format!("{h}▼")).style(bold.add_modifier(Modifier::UNDERLINED)),
        false => Cell::from(h).style(bold),
    }));
    let rows = sample.agents.iter().map(|a| Row::new(cells(a)));
    let widths = [
        Constraint::Length(16),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(10),
        Constraint::Length(8),
        Constraint::Length(24),
        Constraint::Fill(1),
    ];
    let at = state
        .selected
        .as_ref()
        .and_then(|s| sample.agents.iter().position(|a| &a.agent == s));
    state.table.select(at);
    f.render_stateful_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(" agents "))
            .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED)),
        agents,
        &mut state.table,
    );
    let mut lines: Vec<Line> = sample
        .agents
        .iter()
        .filter(|a| state.selected.as_ref().is_none_or(|s| &a.agent == s))
        .flat_map(|a| {
            a.runs
                .iter()
                .map(move |r| Line::from(format!("{:<8} {:<16} {}", r.pid, a.agent, r.command)))
        })
        .collect();
    // Never a run hidden unsaid: the last line counts those that do not fit.
    let room = usize::from(runs.height.saturating_sub(2));
    if lines.len() > room {
        let hidden = lines.len() - room.saturating_sub(1);
        lines.truncate(room.saturating_sub(1));
        lines.push(Line::from(format!(
            "… {hidden} more runs (select an agent with ↑↓ for its own)"
        )));
    }
    let title = match &state.selected {
        Some(s) => format!(" runs of {s} "),
        None => " runs ".to_string(),
    };
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        runs,
    );
    f.render_widget(
        Paragraph::new("q quit  s sort  / filter  ↑↓ select  Esc clear"),
        help,
    );
}

/// The header of the column sorted by.
fn sort_column(state: &State) -> &'static str {
    use clawfs_args::top::SortKey;
    match state.order.sort {
        SortKey::Ops => "OPS/S",
        SortKey::Bytes => "BYTES",
        SortKey::Refusals => "REFUSED",
        SortKey::Quota => "QUOTA",
        SortKey::Procs => "PROCS",
        SortKey::Agent => "AGENT",
    }
}
