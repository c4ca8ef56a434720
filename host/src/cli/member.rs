//! `tenure member list | promote | remove`: the Raft members, as etcd's `member` commands.
//!
//! Which members vote is the leader's upkeep (`raft/autopilot.rs`); these commands show
//! it and let an operator step in: promote a caught-up learner now, or remove a member
//! that is gone for good. The leader answers (another node names it, and the client
//! follows).

use std::fmt::Write as _;
use std::time::Duration;

use clap::Subcommand;

use super::admin::Connection;
use crate::api::{AdminRequest, MemberList};
use crate::pki;
use crate::terminal::escape;

/// The member commands.
#[derive(Debug, Subcommand)]
pub enum MemberCommand {
    /// The voters and learners: ids, addresses, how far each lags the leader's log,
    /// which ones the leader cannot reach, and why a voter was last replaced, promoted
    /// or stepped down.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: Connection,
    },
    /// Make a caught-up learner a voter now (the leader promotes learners up to its
    /// target on its own; `member list` shows the target).
    Promote {
        /// The learner to promote.
        #[arg(value_name = "NODE")]
        name: String,
        #[command(flatten)]
        conn: Connection,
    },
    /// Remove a node that is gone for good: its session ends, its slots move, and it
    /// leaves the Raft membership (to revoke its certificate too, use `revoke`). A node
    /// whose data dir was lost rejoins afterwards with `join`, as a new member.
    Remove {
        /// The node to remove.
        #[arg(value_name = "NODE")]
        name: String,
        #[command(flatten)]
        conn: Connection,
    },
}

impl MemberCommand {
    /// The request, its connection flags, and whether JSON is wanted.
    pub(super) fn request(self) -> anyhow::Result<(AdminRequest, Connection, bool)> {
        Ok(match self {
            MemberCommand::List { json, conn } => (AdminRequest::Members, conn, json),
            MemberCommand::Promote { name, conn } => {
                pki::validate_name(&name)?;
                (AdminRequest::Promote { node: name }, conn, false)
            }
            MemberCommand::Remove { name, conn } => {
                pki::validate_name(&name)?;
                (AdminRequest::Remove { node: name }, conn, false)
            }
        })
    }
}

/// The member list as a table, every name escaped (a node's words are shown, never
/// obeyed, by a terminal).
pub fn render(list: &MemberList) -> String {
    let mut text = String::new();
    let voters = list.members.iter().filter(|m| m.voter).count();
    let _ = writeln!(
        text,
        "leader {} in term {}, log at {}; {voters} voters, target {}",
        escape(&list.leader),
        list.term,
        list.last_index,
        list.target
    );
    let rows: Vec<[String; 6]> = list
        .members
        .iter()
        .map(|m| {
            [
                escape(&m.name).into_owned(),
                if m.voter { "voter" } else { "learner" }.into(),
                format!("{:016x}", m.id),
                escape(&m.addr).into_owned(),
                m.matched.map_or("?".into(), |at| {
                    format!("{}", list.last_index.saturating_sub(at))
                }),
                match m.unreachable_ms {
                    Some(ms) => format!(
                        "unreachable for {}",
                        humantime::format_duration(Duration::from_secs(ms / 1000))
                    ),
                    None => "answers".into(),
                },
            ]
        })
        .collect();
    let head = ["NAME", "ROLE", "ID", "ADDRESS", "LAG", "REACHABLE"];
    let widths: Vec<usize> = (0..head.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([head[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| {
        let mut out = String::new();
        for (c, cell) in cells.iter().enumerate() {
            let _ = write!(out, "{cell:<w$}  ", w = widths[c]);
        }
        out.trim_end().to_owned()
    };
    let _ = writeln!(text, "{}", line(&head));
    for (row, member) in rows.iter().zip(&list.members) {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        let _ = writeln!(text, "{}", line(&cells));
        if let Some(note) = &member.note {
            let _ = writeln!(text, "  {}", escape(note));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MemberRow;

    #[test]
    fn the_table_shows_roles_lag_reachability_and_notes() {
        let list = MemberList {
            leader: "n1".into(),
            term: 4,
            last_index: 120,
            target: 3,
            members: vec![
                MemberRow {
                    name: "n1".into(),
                    id: 1,
                    addr: "10.0.0.1:7400".into(),
                    voter: true,
                    matched: Some(120),
                    unreachable_ms: None,
                    note: None,
                },
                MemberRow {
                    name: "n5".into(),
                    id: 5,
                    addr: "10.0.0.5:7400".into(),
                    voter: false,
                    matched: Some(90),
                    unreachable_ms: Some(200_500),
                    note: Some("voters shrank to 3: n5 unreachable for over 3m".into()),
                },
            ],
        };
        let text = render(&list);
        assert!(
            text.starts_with("leader n1 in term 4, log at 120; 1 voters, target 3\n"),
            "{text}"
        );
        assert!(
            text.contains("n1    voter    0000000000000001  10.0.0.1:7400  0    answers"),
            "{text}"
        );
        assert!(
            text.contains(
                "n5    learner  0000000000000005  10.0.0.5:7400  30   unreachable for 3m 20s"
            ),
            "{text}"
        );
        assert!(
            text.contains("\n  voters shrank to 3: n5 unreachable for over 3m\n"),
            "{text}"
        );
    }
}
